//! Destructive sync: healing lost evictions, and a chunked sync of
//! thousands of patch steps that lookups see as one replacement.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use protocol::hashing::BlockHash;
use state::{BatchLimits, StateStore, StateTtls};
use support::{Valkey, raw_state, register_in, store, store_with};

const M: &str = "m";

fn ttls() -> StateTtls {
    StateTtls {
        worker_lease: Duration::from_secs(120),
        patch_stall: Duration::from_millis(300),
        ..StateTtls::default()
    }
}

async fn holds(s: &StateStore, h: BlockHash) -> bool {
    let l = s.probe(M, &[h]).await.unwrap();
    l.workers
        .iter()
        .any(|w| w.info.worker_id == "w" && w.matched_blocks == 1)
}

#[tokio::test]
async fn sync_heals_entries_whose_eviction_report_was_lost() {
    let v = Valkey::start();
    let s = store(&v, "sy", "r1", ttls());
    register_in(&s, "w").await;
    let hs: Vec<BlockHash> = (1..=4).map(BlockHash).collect();
    s.stored(M, "w", &hs).await.unwrap();
    // The worker evicted blocks 3 and 4, but the report never arrived.
    assert!(
        holds(&s, hs[2]).await,
        "phantom entry expected before the sync"
    );
    let out = s.sync(M, "w", &hs[..2]).await.unwrap();
    assert_eq!(out.active, 2);
    assert!(!holds(&s, hs[2]).await && !holds(&s, hs[3]).await);
    assert!(holds(&s, hs[0]).await && holds(&s, hs[1]).await);
    let raw = raw_state(&v, "sy", M);
    assert_eq!(raw.forward_pairs(), raw.reverse_pairs());
    assert_eq!(raw.forward.len(), 2);
}

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

/// Digests by bucket: (two hex digits, 16 hex digits), nonzero only.
type Digests = Vec<(String, String)>;

/// The digests the state keeps for incarnation `idx` (dg:<idx>), and the
/// ones its confirmed membership (r \ sp) has.
fn digests_kept_and_due(v: &Valkey, idx: &str) -> (Digests, Digests) {
    use redis::Commands;
    let mut c = v.conn();
    let base = format!("sy:{{{M}}}");
    let mut kept: Digests = c.hgetall(format!("{base}:dg:{idx}")).unwrap();
    kept.sort();
    let reverse: BTreeSet<String> = c.smembers(format!("{base}:r:{idx}")).unwrap();
    let spec: BTreeSet<String> = c.smembers(format!("{base}:sp:{idx}")).unwrap();
    let confirmed = reverse
        .difference(&spec)
        .map(|h| BlockHash(u64::from_str_radix(h, 16).unwrap()));
    let due = protocol::index::digests(confirmed)
        .iter()
        .enumerate()
        .filter(|(_, d)| **d != 0)
        .map(|(b, d)| (format!("{b:02x}"), format!("{d:016x}")))
        .collect();
    (kept, due)
}

#[tokio::test]
async fn digests_follow_every_change_and_an_unchanged_worker_syncs_by_one_check() {
    use protocol::index::{digests, digests_hex};
    use rand::{Rng, SeedableRng};
    let v = Valkey::start();
    let s = store(&v, "sy", "r1", ttls());
    register_in(&s, "w").await;
    let idx: String = redis::Commands::hget(&mut v.conn(), format!("sy:{{{M}}}:ids"), "w").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // A small universe, so that operations overlap: claims of confirmed
    // blocks, stores of speculative ones, evictions of unknown ones.
    let universe: Vec<BlockHash> = (0..400).map(|_| BlockHash(rng.random())).collect();
    let pick = |rng: &mut rand::rngs::StdRng, n: usize| -> Vec<BlockHash> {
        let mut v: Vec<BlockHash> = (0..n)
            .map(|_| universe[rng.random_range(0..universe.len())])
            .collect();
        v.sort();
        v.dedup();
        v
    };
    // What the worker holds (its reports are its truth).
    let mut held: BTreeSet<BlockHash> = BTreeSet::new();
    for step in 0..120 {
        match rng.random_range(0..4) {
            0 => {
                s.claim(M, "w", &pick(&mut rng, 40)).await.unwrap();
            }
            1 => {
                let hs = pick(&mut rng, 50);
                s.stored(M, "w", &hs).await.unwrap();
                held.extend(hs);
            }
            2 => {
                let hs = pick(&mut rng, 50);
                s.evict(M, "w", &hs).await.unwrap();
                for h in &hs {
                    held.remove(h);
                }
            }
            _ => {
                let fresh = pick(&mut rng, 20);
                let hs: Vec<BlockHash> = held
                    .iter()
                    .copied()
                    .filter(|_| rng.random_bool(0.8))
                    .chain(fresh)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                s.sync(M, "w", &hs).await.unwrap();
                held = hs.into_iter().collect();
            }
        }
        let (kept, due) = digests_kept_and_due(&v, &idx);
        assert_eq!(
            kept, due,
            "step {step}: kept digests differ from the membership's"
        );
    }
    // The worker's own digests equal the fleet's: one check, no snapshot.
    let hex = digests_hex(&digests(held.iter().copied()));
    let before: u64 =
        redis::Commands::hget(&mut v.conn(), format!("sy:{{{M}}}:w:{idx}"), "synced_until")
            .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(s.sync_check(M, "w", &hex).await.unwrap(), None);
    let after: u64 =
        redis::Commands::hget(&mut v.conn(), format!("sy:{{{M}}}:w:{idx}"), "synced_until")
            .unwrap();
    assert!(
        after > before,
        "the check renews the entries ({before} -> {after})"
    );
    // One block more on the worker: its bucket differs, and only it.
    let extra = BlockHash(0xab00_0000_0000_0001);
    let hex = digests_hex(&digests(held.iter().copied().chain([extra])));
    assert_eq!(
        s.sync_check(M, "w", &hex).await.unwrap(),
        Some(vec!["ab".to_owned()])
    );
    // Malformed digests are refused before Valkey.
    assert!(matches!(
        s.sync_check(M, "w", "00").await,
        Err(state::StateError::Invalid { .. })
    ));
    // Valkey lost everything: the worker is unknown, so it re-registers
    // and sends its snapshot (the pusher's path).
    redis::cmd("FLUSHALL").exec(&mut v.conn()).unwrap();
    assert!(s.sync_check(M, "w", &hex).await.is_err());
}

/// Lost reports change a few buckets; the repair syncs those alone: the
/// missing blocks added, the gone ones removed, a live speculative claim and
/// another worker's entries kept, the digests equal again.
#[tokio::test]
async fn a_repair_syncs_only_the_differing_buckets() {
    use protocol::index::{digests, digests_hex};
    use rand::{Rng, SeedableRng};
    let v = Valkey::start();
    let s = store(&v, "sy", "r1", ttls());
    register_in(&s, "w").await;
    register_in(&s, "w2").await;
    let idx: String = redis::Commands::hget(&mut v.conn(), format!("sy:{{{M}}}:ids"), "w").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let fleet: Vec<BlockHash> = (0..2000).map(|_| BlockHash(rng.random())).collect();
    s.stored(M, "w", &fleet).await.unwrap();
    // Lost reports: the worker evicted two blocks (one also held by w2) and
    // stored three the fleet never heard of. One bucket differs by three
    // blocks (two new, one gone: its digests' XOR is no block, so the
    // repair reads that bucket's members); the others by one (the XOR is
    // the block itself).
    let mut new: Vec<BlockHash> = (0..3).map(|_| BlockHash(rng.random())).collect();
    let hot = new[0].0 >> 56;
    new[1] = BlockHash((hot << 56) | (rng.random::<u64>() >> 8));
    let same_bucket = *fleet[21..].iter().find(|h| h.0 >> 56 == hot).unwrap();
    let gone = [fleet[10], same_bucket];
    s.stored(M, "w2", &gone[..1]).await.unwrap();
    let worker: Vec<BlockHash> = fleet
        .iter()
        .copied()
        .filter(|h| !gone.contains(h))
        .chain(new.iter().copied())
        .collect();
    // A request routed meanwhile claimed a block in a bucket that differs.
    let claimed = BlockHash((new[0].0 & 0xff00_0000_0000_0000) | 0x42);
    assert_eq!(s.claim(M, "w", &[claimed]).await.unwrap(), 1);
    let hex = digests_hex(&digests(worker.iter().copied()));
    let differing = s.sync_check(M, "w", &hex).await.unwrap().unwrap();
    assert!(
        (1..=5).contains(&differing.len()),
        "a few buckets differ: {differing:?}"
    );
    let out = s
        .sync_repair(M, "w", &differing, &worker, None, None)
        .await
        .unwrap();
    assert_eq!(
        out,
        state::RepairOutcome {
            added: 3,
            removed: 2,
            retiered: 0
        }
    );
    assert_eq!(s.sync_check(M, "w", &hex).await.unwrap(), None);
    for h in &new {
        assert!(holds(&s, *h).await);
    }
    for h in &gone {
        assert!(!holds(&s, *h).await);
    }
    assert!(holds(&s, claimed).await, "the live claim stays");
    let l = s.probe(M, &gone[..1]).await.unwrap();
    assert!(
        l.workers
            .iter()
            .any(|w| w.info.worker_id == "w2" && w.matched_blocks == 1)
    );
    let (kept, due) = digests_kept_and_due(&v, &idx);
    assert_eq!(kept, due);
    let raw = raw_state(&v, "sy", M);
    assert_eq!(raw.forward_pairs(), raw.reverse_pairs());
    // Repeating it changes nothing.
    let again = s
        .sync_repair(M, "w", &differing, &worker, None, None)
        .await
        .unwrap();
    assert_eq!(again, state::RepairOutcome::default());
    // Too many buckets, a bad bucket, an unknown worker: refused.
    let all: Vec<String> = (0..=255).map(|b| format!("{b:02x}")).collect();
    for (buckets, who) in [
        (&all[..], "w"),
        (&["g0".to_owned()][..], "w"),
        (&all[..1], "nobody"),
    ] {
        assert!(
            s.sync_repair(M, who, buckets, &worker, None, None)
                .await
                .is_err(),
            "{who} {:?}",
            &buckets[..1]
        );
    }
}
