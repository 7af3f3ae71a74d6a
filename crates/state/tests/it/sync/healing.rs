//! Healing: lost eviction reports, digests that follow every change (an
//! unchanged worker syncs by one check), repairs of the differing buckets only.

use super::*;

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
