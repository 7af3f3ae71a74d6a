//! The prefix-family index: a long prompt's anchors and last block, no
//! family before the family depth, branch points between anchors.

use super::*;

#[test]
fn a_long_prompt_indexes_its_anchors_and_its_last_block() {
    let mut c = cache(64);
    let chain: Vec<u64> = (1..=40).collect();
    run(&mut c, 1, &chain, 40);
    let stored = c.drain_events();
    let [
        CacheEvent::Stored {
            hashes, indexed, ..
        },
    ] = stored.as_slice()
    else {
        panic!("one run expected: {stored:?}");
    };
    assert_eq!(hashes.len(), 40);
    // Positions 0, 1, 3, 7, 15 and 31 (anchors) and 39 (the run's last),
    // each in the chain's family: its first block.
    let want: Vec<FamilyBlock> = hs(&[1, 2, 4, 8, 16, 32, 40])
        .into_iter()
        .map(|hash| FamilyBlock::new(hash, Some(h(1))))
        .collect();
    assert_eq!(indexed, &want);
    assert_eq!(c.indexed_hashes(), want);
    // Evicting the whole prompt reports the indexed blocks among the removed.
    c.allocate(RequestId(2), &[], 64).unwrap();
    let removed = c.drain_events();
    let [CacheEvent::Removed { hashes, indexed }] = removed.as_slice() else {
        panic!("one eviction expected: {removed:?}");
    };
    assert_eq!(hashes.len(), 40);
    let mut indexed = indexed.clone();
    indexed.sort();
    assert_eq!(indexed, want);
    assert!(c.indexed_hashes().is_empty());
    c.check_invariants().unwrap();
}

#[test]
fn blocks_before_the_family_depth_have_no_family() {
    let mut c = cache(64);
    c.set_family_blocks(4);
    let chain: Vec<u64> = (1..=20).collect();
    run(&mut c, 1, &chain, 20);
    let families: Vec<(u64, Option<u64>)> = c
        .indexed_hashes()
        .iter()
        .map(|b| (b.hash.0, b.family.map(|f| f.0)))
        .collect();
    // Anchors 0, 1, 3, 7, 15 and the tip 19: the first two are head blocks,
    // the rest belong to the family of block 3 (the fourth).
    assert_eq!(
        families,
        [
            (1, None),
            (2, None),
            (4, Some(4)),
            (8, Some(4)),
            (16, Some(4)),
            (20, Some(4))
        ]
    );
}

#[test]
fn a_prefill_that_branches_between_anchors_indexes_its_parent() {
    let mut c = cache(64);
    let first: Vec<u64> = (1..=24).collect();
    run(&mut c, 1, &first, 24);
    c.drain_events();
    // 13 blocks shared, then 5 new: block 13 (hash 13) becomes indexed,
    // reported with the new run (then the run's anchor, 16, and tip, 18).
    let mut second: Vec<u64> = (1..=13).collect();
    second.extend(101..=105);
    run(&mut c, 2, &second, 18);
    let events = c.drain_events();
    let [CacheEvent::Stored { indexed, .. }] = events.as_slice() else {
        panic!("one run expected: {events:?}");
    };
    let got: Vec<BlockHash> = indexed.iter().map(|b| b.hash).collect();
    assert_eq!(got, hs(&[13, 103, 105]));
    assert!(c.indexed_hashes().iter().any(|b| b.hash == h(13)));
    // A third branch there adds nothing new for block 13.
    let mut third: Vec<u64> = (1..=13).collect();
    third.extend(201..=205);
    run(&mut c, 3, &third, 18);
    let events = c.drain_events();
    let [CacheEvent::Stored { indexed, .. }] = events.as_slice() else {
        panic!("one run expected: {events:?}");
    };
    assert!(!indexed.iter().any(|b| b.hash == h(13)));
}

#[test]
fn a_branch_point_cached_by_another_request_is_indexed_too() {
    // Both requests allocate before either computes: the second's first 13
    // blocks are duplicates of the first's, cached by the first's commit.
    let mut c = cache(64);
    let first: Vec<u64> = (1..=24).collect();
    let mut second: Vec<u64> = (1..=13).collect();
    second.extend(101..=105);
    c.allocate(RequestId(1), &hs(&first), 24).unwrap();
    c.allocate(RequestId(2), &hs(&second), 18).unwrap();
    c.commit(RequestId(1)).unwrap();
    c.drain_events();
    c.commit(RequestId(2)).unwrap();
    let events = c.drain_events();
    let [CacheEvent::Stored { indexed, .. }] = events.as_slice() else {
        panic!("one run expected: {events:?}");
    };
    let got: Vec<BlockHash> = indexed.iter().map(|b| b.hash).collect();
    assert_eq!(got, hs(&[13, 103, 105]));
    for id in [1, 2] {
        c.free(RequestId(id)).unwrap();
    }
    c.check_invariants().unwrap();
}
