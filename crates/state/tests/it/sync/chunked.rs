//! A chunked sync: applied as one replacement, a retried last chunk and
//! commit change nothing, GC finishes a sync whose router died mid-patch.

use super::*;

fn hashes(range: std::ops::Range<u64>) -> Vec<BlockHash> {
    // Spread over the whole key space, so every bucket is touched.
    range
        .map(|i| BlockHash(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect()
}

/// Old set 0..10k, new set 5k..25k: 5k removed, 15k added, 5k kept.
fn old_and_new() -> (Vec<BlockHash>, Vec<BlockHash>) {
    (hashes(0..10_000), hashes(5_000..25_000))
}

/// Staging calls and patch steps as small as a 200k sync's are many: what
/// these tests prove (a replacement staged in hundreds of calls and
/// patched in thousands of steps, observed, or abandoned and resumed, is
/// one replacement) depends on the number of calls and steps, not on the
/// hashes per step. The same number at the default limits needs 200k
/// hashes, and 10× the test's time; the size is the state bench's
/// (`cargo bench --bench state_bench`).
fn small_steps() -> BatchLimits {
    BatchLimits {
        stage_per_call: 64,
        step_budget: 8,
        ..BatchLimits::default()
    }
}

/// Probes: 8 old-only, 8 new-only, spread over the ranges.
fn probes() -> (Vec<BlockHash>, Vec<BlockHash>) {
    let old_only = (0..8).map(|i| hashes(i * 600..i * 600 + 1)[0]).collect();
    let new_only = (0..8)
        .map(|i| hashes(10_000 + i * 1_800..10_000 + i * 1_800 + 1)[0])
        .collect();
    (old_only, new_only)
}

/// Watches single-block lookups (each one atomic) until `done`. Each shows
/// the old state (an old-only block held, or a new-only block missing) or the
/// new one; a replacement applied piecemeal would show old after new.
/// Returns how many old and new observations it made.
fn observer(s: StateStore, done: Arc<AtomicBool>) -> tokio::task::JoinHandle<(usize, usize)> {
    tokio::spawn(async move {
        let (old_only, new_only) = probes();
        let (mut old_seen, mut new_seen) = (0, 0);
        while !done.load(Ordering::Relaxed) {
            for (o, n) in old_only.iter().zip(&new_only) {
                for is_new in [holds(&s, *n).await, !holds(&s, *o).await] {
                    if is_new {
                        new_seen += 1;
                    } else {
                        assert_eq!(
                            new_seen, 0,
                            "old state seen after {new_seen} new observations"
                        );
                        old_seen += 1;
                    }
                }
            }
        }
        (old_seen, new_seen)
    })
}

#[tokio::test]
async fn a_retried_last_chunk_and_commit_change_nothing() {
    let v = Valkey::start();
    let s = store(&v, "sy", "r1", ttls());
    register_in(&s, "w").await;
    let hs: Vec<BlockHash> = (1..=6).map(BlockHash).collect();
    s.sync_stage(M, "w", "snap-r", &hs[..3]).await.unwrap();
    s.sync_stage(M, "w", "snap-r", &hs[3..]).await.unwrap();
    assert_eq!(s.sync_commit(M, "w", "snap-r").await.unwrap().active, 6);
    // The reply was lost; the worker sends its last chunk again.
    s.sync_stage(M, "w", "snap-r", &hs[3..]).await.unwrap();
    assert_eq!(s.sync_commit(M, "w", "snap-r").await.unwrap().active, 6);
    let raw = raw_state(&v, "sy", M);
    assert_eq!(raw.forward.len(), 6, "a retry must not replace the set");
    assert_eq!(raw.forward_pairs(), raw.reverse_pairs());
    // A new sync id is a new snapshot.
    s.sync_stage(M, "w", "snap-s", &hs[..1]).await.unwrap();
    assert_eq!(s.sync_commit(M, "w", "snap-s").await.unwrap().active, 1);
}

/// A worker holding the old set; returns the new set to sync to.
async fn worker_with_old_set() -> (Valkey, StateStore, Vec<BlockHash>) {
    let v = Valkey::start();
    let s = store_with(&v, "sy", "r1", ttls(), small_steps());
    register_in(&s, "w").await;
    let (old, new) = old_and_new();
    for c in old.chunks(5_000) {
        s.stored(M, "w", c).await.unwrap();
    }
    (v, s, new)
}

#[tokio::test]
async fn a_chunked_sync_is_applied_as_one_replacement() {
    let (v, s, new) = worker_with_old_set().await;
    let done = Arc::new(AtomicBool::new(false));
    let watch = observer(s.clone(), done.clone());
    for c in new.chunks(5_000) {
        s.sync_stage(M, "w", "snap-1", c).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let out = s.sync_commit(M, "w", "snap-1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    done.store(true, Ordering::Relaxed);
    let (old_seen, new_seen) = watch.await.unwrap();
    assert!(
        old_seen > 0 && new_seen > 0,
        "observer saw old {old_seen}, new {new_seen}"
    );
    assert_eq!(out.active, 20_000);
    let raw = raw_state(&v, "sy", M);
    assert_eq!(raw.forward_pairs(), raw.reverse_pairs());
    let want: BTreeSet<String> = new.iter().map(|h| h.to_hex()).collect();
    let got: BTreeSet<String> = raw.forward.keys().cloned().collect();
    assert!(
        got == want,
        "after sync: {} entries, {} expected",
        got.len(),
        want.len()
    );
}

#[tokio::test]
async fn gc_finishes_a_sync_whose_router_died_mid_patch() {
    let (v, s, new) = worker_with_old_set().await;
    s.sync_stage(M, "w", "snap-2", &new).await.unwrap();
    // The router applying the sync dies shortly after the commit.
    let applying = {
        let s = s.clone();
        tokio::spawn(async move { s.sync_commit(M, "w", "snap-2").await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    applying.abort();
    let _ = applying.await;
    let (old_only, new_only) = probes();
    let l = s.probe(M, &[]).await.unwrap();
    assert!(
        l.workers[0].info.syncing,
        "the patch should still be in progress"
    );
    // Mid-patch, lookups already see exactly the new set.
    for (o, n) in old_only.iter().zip(&new_only) {
        assert!(!holds(&s, *o).await && holds(&s, *n).await);
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = s.gc(M, 0).await.unwrap();
    assert_eq!(r.resumed_syncs, 1);
    let raw = raw_state(&v, "sy", M);
    assert_eq!(raw.forward_pairs(), raw.reverse_pairs());
    assert_eq!(raw.forward.len(), 20_000);
    assert!(!s.probe(M, &[]).await.unwrap().workers[0].info.syncing);
}
