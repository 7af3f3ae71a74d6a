//! A repair of random tier and membership drift ends equal.

use super::*;

/// 16 hashes in each of the digest buckets 00, 5a and ff (00: a tier
/// term's first byte is 0, so a lone tier change there looks like a block
/// of its bucket to the repair's one-block shortcut), low bytes spread.
fn crowded() -> Vec<BlockHash> {
    [0x00u64, 0x5a, 0xff]
        .iter()
        .flat_map(|b| {
            (1..=16u64).map(move |i| {
                let low = (i ^ (b << 8)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8;
                BlockHash((b << 56) | low)
            })
        })
        .collect()
}

/// What a random fleet state and worker truth over `crowded` hold: per
/// hash, nothing, a claim, or a confirmed entry on a tier.
fn holding() -> impl proptest::strategy::Strategy<Value = Vec<Option<Option<Tier>>>> {
    use proptest::prelude::*;
    let one = prop_oneof![
        3 => Just(None),
        1 => Just(Some(None)),
        4 => prop::sample::select(Tier::ALL.to_vec()).prop_map(|t| Some(Some(t))),
    ];
    prop::collection::vec(one, 48)
}

#[test]
fn a_repair_of_random_tier_and_membership_drift_ends_equal() {
    use proptest::prelude::*;
    let v = Valkey::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = ProptestConfig {
        cases: support::cases(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let blocks = crowded();
    proptest!(cfg, |(fleet in holding(), truth in holding())| {
        rt.block_on(async {
            let _: () = redis::cmd("FLUSHALL").query(&mut v.conn()).unwrap();
            let s = store(&v, NS, "r1", ttls());
            register_in(&s, "w").await;
            let idx = idx_of(&v, "w");
            // The fleet's view: claims and confirmed entries per tier (one
            // call each; the blocks are distinct, so the order is moot).
            let held_as = |want: Option<Tier>| -> Vec<BlockHash> {
                blocks
                    .iter()
                    .zip(&fleet)
                    .filter(|(_, held)| **held == Some(want))
                    .map(|(h, _)| *h)
                    .collect()
            };
            let claimed = held_as(None);
            if !claimed.is_empty() {
                s.claim(M, "w", &claimed).await.unwrap();
            }
            for t in Tier::ALL {
                let stored = held_as(Some(t));
                if !stored.is_empty() {
                    s.stored_on(M, "w", &stored, t).await.unwrap();
                }
            }
            // The worker's truth: confirmed blocks on their tiers.
            let worker: BTreeMap<BlockHash, Tier> = blocks
                .iter()
                .zip(&truth)
                .filter_map(|(h, t)| Some((*h, (*t)??)))
                .collect();
            let digests = digests_of(&worker);
            let Some(differing) = s.sync_check(M, "w", &digests).await.unwrap() else {
                return;
            };
            let (listed, tiers): (Vec<BlockHash>, Vec<Tier>) =
                worker.iter().map(|(h, t)| (*h, *t)).unzip();
            s.sync_repair(M, "w", &differing, &listed, None, Some(&tiers))
                .await
                .unwrap();
            assert_eq!(
                s.sync_check(M, "w", &digests).await.unwrap(),
                None,
                "fleet {fleet:?}, worker {worker:?}"
            );
            let letter = letters(&v, &idx);
            for h in &blocks {
                let got = letter(*h);
                match worker.get(h) {
                    Some(t) => assert_eq!(got, Some(t.entry_kind()), "{h}"),
                    // Live claims stay, as in a full sync.
                    None => assert!(matches!(got, None | Some('s')), "{h}: {got:?}"),
                }
            }
        });
    });
}
