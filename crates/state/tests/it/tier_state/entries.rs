//! An entry's tier follows its blocks' best tier until the last copy
//! goes; a lost demotion is repaired by the next check.

use super::*;

#[tokio::test]
async fn an_entry_follows_its_blocks_best_tier_until_the_last_copy_goes() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    register_in(&s, "w").await;
    let idx = idx_of(&v, "w");
    let h = spread(1, 1)[0];
    let mut worker = BTreeMap::new();
    for (tier, want) in [
        (Tier::Gpu, 'c'),
        // The GPU copy evicted, a CPU copy kept: a demotion, not an eviction.
        (Tier::Cpu, 'h'),
        (Tier::Disk, 'd'),
        // Loaded back onto the GPU.
        (Tier::Gpu, 'c'),
        (Tier::Cpu, 'h'),
    ] {
        s.stored_on(M, "w", &[h], tier).await.unwrap();
        worker.insert(h, tier);
        assert_eq!(letter(&v, &idx, h), Some(want), "{tier}");
        assert_eq!(tier_of(&s, "w", h).await, one(tier), "{tier}");
        assert_eq!(
            s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
            None
        );
    }
    // A claim does not re-claim a block held on the CPU: it stays 'h'.
    assert_eq!(s.claim(M, "w", &[h]).await.unwrap(), 0);
    assert_eq!(letter(&v, &idx, h), Some('h'));
    // Removed from its last medium: evicted, the digests empty again.
    assert_eq!(s.evict(M, "w", &[h]).await.unwrap(), 1);
    assert_eq!(letter(&v, &idx, h), None);
    assert_eq!(tier_of(&s, "w", h).await, TierBlocks::default());
    worker.clear();
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    // A speculative claim, then the worker's store on the CPU: confirmed there.
    s.claim(M, "w", &[h]).await.unwrap();
    assert_eq!(letter(&v, &idx, h), Some('s'));
    s.stored_on(M, "w", &[h], Tier::Cpu).await.unwrap();
    assert_eq!(letter(&v, &idx, h), Some('h'));
}

#[tokio::test]
async fn a_lost_demotion_is_found_by_the_next_check_and_repaired() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    register_in(&s, "w").await;
    let idx = idx_of(&v, "w");
    let blocks = spread(300, 2);
    s.stored(M, "w", &blocks).await.unwrap();
    let mut worker: BTreeMap<BlockHash, Tier> = blocks.iter().map(|h| (*h, Tier::Gpu)).collect();
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    // Three blocks move to the CPU and one is loaded back from it... but the
    // reports never arrive (a router died with them).
    let demoted = [blocks[3], blocks[77], blocks[150]];
    for h in demoted {
        worker.insert(h, Tier::Cpu);
    }
    s.stored_on(M, "w", &[blocks[200]], Tier::Cpu)
        .await
        .unwrap();
    // (that one's promotion is the lost report)
    let digests = digests_of(&worker);
    let differing = s.sync_check(M, "w", &digests).await.unwrap().unwrap();
    let mut want: Vec<String> = demoted
        .iter()
        .chain([&blocks[200]])
        .map(|h| format!("{:02x}", digest_bucket(*h)))
        .collect();
    want.sort();
    want.dedup();
    let mut got = differing.clone();
    got.sort();
    assert_eq!(got, want, "the tier changes' buckets differ, and only they");
    // The repair, as the pusher sends it: its blocks in those buckets, with
    // their tiers.
    let (listed, tiers): (Vec<BlockHash>, Vec<Tier>) = worker
        .iter()
        .filter(|(h, _)| want.contains(&format!("{:02x}", digest_bucket(**h))))
        .map(|(h, t)| (*h, *t))
        .unzip();
    let out = s
        .sync_repair(M, "w", &differing, &listed, None, Some(&tiers))
        .await
        .unwrap();
    assert_eq!((out.added, out.removed), (0, 0), "membership was right");
    assert_eq!(out.retiered, 4, "the three demotions and the promotion");
    assert_eq!(s.sync_check(M, "w", &digests).await.unwrap(), None);
    let letter = letters(&v, &idx);
    for h in demoted {
        assert_eq!(letter(h), Some('h'));
    }
    assert_eq!(letter(blocks[200]), Some('c'));
    assert_eq!(letter(blocks[0]), Some('c'));
}
