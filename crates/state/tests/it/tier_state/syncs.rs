//! Syncs and tiers: a full sync leaves every entry on the snapshot's tier,
//! and reports during a sync keep their tier through the patch.

use super::*;

#[tokio::test]
async fn a_full_sync_leaves_every_entry_on_the_snapshots_tier() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    register_in(&s, "w").await;
    let blocks = spread(120, 3);
    let tier = |i: usize| Tier::ALL[i % 3];
    let tiers: Vec<Tier> = (0..blocks.len()).map(tier).collect();
    // A fresh incarnation (or an emptied Valkey): the snapshot inserts all.
    s.sync_in_families(M, "w", &blocks, None, Some(&tiers))
        .await
        .unwrap();
    let idx = idx_of(&v, "w");
    let mut worker: BTreeMap<BlockHash, Tier> =
        blocks.iter().copied().zip(tiers.iter().copied()).collect();
    let letter = letters(&v, &idx);
    for (i, h) in blocks.iter().enumerate() {
        assert_eq!(letter(*h), Some(tier(i).entry_kind()));
    }
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    // Every tier moves one step (lost reports of all kinds: promotions,
    // demotions), a block goes and one comes: the next full snapshot puts
    // each where the worker has it.
    let mut next: Vec<BlockHash> = blocks[1..].to_vec();
    next.push(spread(1, 99)[0]);
    let next_tiers: Vec<Tier> = (0..next.len()).map(|i| tier(i + 2)).collect();
    s.sync_in_families(M, "w", &next, None, Some(&next_tiers))
        .await
        .unwrap();
    worker = next
        .iter()
        .copied()
        .zip(next_tiers.iter().copied())
        .collect();
    let letter = letters(&v, &idx);
    for (h, t) in &worker {
        assert_eq!(letter(*h), Some(t.entry_kind()), "{h}");
    }
    assert_eq!(letter(blocks[0]), None);
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    // The target's tiers are gone with the target.
    let st: bool =
        redis::Commands::exists(&mut v.conn(), format!("{NS}:{{{M}}}:st:{idx}")).unwrap();
    assert!(!st);
}

#[tokio::test]
async fn reports_during_a_sync_keep_their_tier_through_the_patch() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    register_in(&s, "w").await;
    let blocks = spread(40, 4);
    s.stored(M, "w", &blocks).await.unwrap();
    // A snapshot with every block on the CPU is committed, not patched yet.
    let cpu = vec![Tier::Cpu; blocks.len()];
    let idx = commit_unpatched(&v, &s, "w", &blocks, &cpu).await;
    // Lookups already see the snapshot's tiers (the target's).
    assert_eq!(tier_of(&s, "w", blocks[5]).await, one(Tier::Cpu));
    // Meanwhile block 5 is loaded back onto the GPU and block 6 goes to
    // disk; block 7 is evicted.
    s.stored_on(M, "w", &[blocks[5]], Tier::Gpu).await.unwrap();
    s.stored_on(M, "w", &[blocks[6]], Tier::Disk).await.unwrap();
    s.evict(M, "w", &[blocks[7]]).await.unwrap();
    assert_eq!(tier_of(&s, "w", blocks[5]).await, one(Tier::Gpu));
    // Any router's gc finishes a stalled patch; here, the patch runs now.
    while call_script(&v, ScriptName::SyncPatch, &[idx.as_bytes(), b"8"]).await[0] != 1 {}
    let mut worker: BTreeMap<BlockHash, Tier> = blocks.iter().map(|h| (*h, Tier::Cpu)).collect();
    worker.insert(blocks[5], Tier::Gpu);
    worker.insert(blocks[6], Tier::Disk);
    worker.remove(&blocks[7]);
    let letter = letters(&v, &idx);
    for (h, t) in &worker {
        assert_eq!(letter(*h), Some(t.entry_kind()), "{h}");
    }
    assert_eq!(letter(blocks[7]), None);
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
}
