//! `sim::PrefixCache`: capacity, LRU eviction, pinning, tail-first freeing
//! and the exactness of its event stream.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;
use sim_worker::{CacheError, CacheEvent, CacheReplay, PrefixCache, RequestId};

const BS: usize = 16;

fn h(n: u64) -> BlockHash {
    BlockHash(n)
}

fn hs(ns: &[u64]) -> Vec<BlockHash> {
    ns.iter().map(|&n| h(n)).collect()
}

fn unplaced(ns: &[u64]) -> Vec<FamilyBlock> {
    ns.iter().map(|&n| FamilyBlock::unplaced(h(n))).collect()
}

/// `events` with their families dropped, for tests about hashes (families
/// have their own test).
fn plain(events: Vec<CacheEvent>) -> Vec<CacheEvent> {
    let strip = |v: &mut Vec<FamilyBlock>| v.iter_mut().for_each(|b| b.family = None);
    events
        .into_iter()
        .map(|mut e| {
            match &mut e {
                CacheEvent::Stored { indexed, .. } | CacheEvent::Removed { indexed, .. } => {
                    strip(indexed)
                }
                CacheEvent::Cleared => {}
            }
            e
        })
        .collect()
}

fn cache(capacity: usize) -> PrefixCache {
    PrefixCache::new(capacity, BS).unwrap().with_audit()
}

/// Allocates, computes and finishes a request: its full blocks end up
/// cached and free.
fn run(c: &mut PrefixCache, id: u64, chain: &[u64], blocks: usize) {
    let id = RequestId(id);
    c.allocate(id, &hs(chain), blocks).unwrap();
    c.commit(id).unwrap();
    c.free(id).unwrap();
    c.check_invariants().unwrap();
}

#[test]
fn rejects_bad_configuration_and_calls() {
    assert!(matches!(
        PrefixCache::new(0, BS),
        Err(CacheError::InvalidConfig(_))
    ));
    assert!(matches!(
        PrefixCache::new(4, 0),
        Err(CacheError::InvalidConfig(_))
    ));
    let mut c = cache(4);
    let r = RequestId(1);
    assert_eq!(
        c.allocate(r, &hs(&[1, 2]), 1),
        Err(CacheError::TooFewBlocks {
            hashes: 2,
            num_blocks: 1
        })
    );
    assert_eq!(
        c.allocate(r, &hs(&[1, 2, 1]), 3),
        Err(CacheError::RepeatedHash(h(1)))
    );
    assert_eq!(
        c.allocate(r, &[], 5),
        Err(CacheError::TooLarge {
            num_blocks: 5,
            capacity: 4
        })
    );
    assert_eq!(c.commit(r), Err(CacheError::UnknownRequest(r)));
    assert_eq!(c.free(r), Err(CacheError::UnknownRequest(r)));
    c.allocate(r, &hs(&[1]), 1).unwrap();
    assert_eq!(c.allocate(r, &[], 1), Err(CacheError::DuplicateRequest(r)));
    assert_eq!(c.stats().used_blocks, 1);
    c.check_invariants().unwrap();
}

#[test]
fn capacity_is_respected_and_failure_has_no_side_effects() {
    let mut c = cache(6);
    run(&mut c, 1, &[1, 2], 2);
    c.allocate(RequestId(2), &hs(&[10, 11, 12]), 4).unwrap();
    assert_eq!(c.stats().used_blocks, 4);
    assert!((c.stats().usage - 4.0 / 6.0).abs() < 1e-12);
    c.drain_events();

    // 2 free blocks (both cached): 3 new blocks cannot be had.
    let before = (c.stats(), c.cached_hashes(), c.eviction_order());
    assert_eq!(
        c.allocate(RequestId(3), &hs(&[20, 21, 22]), 3),
        Err(CacheError::OutOfBlocks {
            needed: 3,
            available: 2
        })
    );
    assert_eq!((c.stats(), c.cached_hashes(), c.eviction_order()), before);
    assert_eq!(c.pending_events(), 0);
    assert!(!c.holds(RequestId(3)));

    // Reusing the cached [1, 2] costs only the 1 remaining block: it fits,
    // and the hits do not count against the free blocks they come from.
    let a = c.allocate(RequestId(3), &hs(&[1, 2, 30]), 3);
    assert!(matches!(
        a,
        Err(CacheError::OutOfBlocks {
            needed: 1,
            available: 0
        })
    ));
    let a = c.allocate(RequestId(3), &hs(&[1, 2]), 2).unwrap();
    assert_eq!((a.hit_blocks, a.new_blocks), (2, 0));
    assert_eq!(c.stats().used_blocks, 6);
    assert_eq!(c.stats().free_blocks, 0);
    assert!((c.stats().usage - 1.0).abs() < 1e-12);
    c.check_invariants().unwrap();
}

#[test]
fn lookup_stops_at_the_first_miss() {
    let mut c = cache(8);
    run(&mut c, 1, &[1, 2, 3], 3);
    assert_eq!(c.lookup(&hs(&[1, 2, 3, 4])), 3);
    assert_eq!(c.lookup(&hs(&[1, 9, 3])), 1);
    assert_eq!(c.lookup(&hs(&[2, 3])), 2);
    assert_eq!(c.lookup(&hs(&[9, 1, 2])), 0);
    let a = c.allocate(RequestId(2), &hs(&[1, 9, 3]), 3);
    // [1] is a hit; 3 is cached but after the miss, so it gets a new block
    // and is not registered twice on commit.
    assert_eq!(a.unwrap().hit_blocks, 1);
    c.drain_events();
    assert_eq!(c.commit(RequestId(2)).unwrap(), 1);
    assert_eq!(
        plain(c.drain_events()),
        vec![CacheEvent::Stored {
            hashes: hs(&[9]),
            parent: Some(h(1)),
            block_size: BS,
            // Block 9 is at position 1: an anchor (protocol::index).
            indexed: unplaced(&[9]),
        }]
    );
    c.check_invariants().unwrap();
}

#[test]
fn free_blocks_are_evicted_least_recently_used_first() {
    let mut c = cache(4);
    for n in 1..=4 {
        run(&mut c, n, &[n], 1);
    }
    assert_eq!(c.eviction_order(), hs(&[1, 2, 3, 4]));
    // Reusing 1 moves it to the tail when freed again.
    run(&mut c, 5, &[1], 1);
    assert_eq!(c.eviction_order(), hs(&[2, 3, 4, 1]));
    c.drain_events();

    c.allocate(RequestId(6), &hs(&[10]), 1).unwrap();
    assert_eq!(
        plain(c.drain_events()),
        vec![CacheEvent::Removed {
            hashes: hs(&[2]),
            // A prompt's first block is an anchor.
            indexed: unplaced(&[2])
        }]
    );
    c.allocate(RequestId(7), &hs(&[11, 12]), 2).unwrap();
    assert_eq!(
        plain(c.drain_events()),
        vec![CacheEvent::Removed {
            hashes: hs(&[3, 4]),
            indexed: unplaced(&[3, 4])
        }]
    );
    assert_eq!(c.cached_hashes(), hs(&[1]));
    assert_eq!(c.stats().evictions, 3);
    c.check_invariants().unwrap();
}

#[test]
fn pinned_blocks_are_never_evicted() {
    let mut c = cache(4);
    let (r1, r2) = (RequestId(1), RequestId(2));
    c.allocate(r1, &hs(&[1, 2]), 2).unwrap();
    c.commit(r1).unwrap();
    // r2 shares the prefix [1] and pins it a second time.
    assert_eq!(c.allocate(r2, &hs(&[1, 5]), 2).unwrap().hit_blocks, 1);
    c.commit(r2).unwrap();
    c.free(r1).unwrap();
    // Free now: r1's block for 2, and the one never used. Block 1 is still
    // held by r2.
    assert_eq!(c.stats().free_blocks, 2);
    assert_eq!(c.eviction_order(), hs(&[2]));
    c.drain_events();
    for round in 0..5u64 {
        let id = RequestId(10 + round);
        c.allocate(id, &[], 2).unwrap();
        c.free(id).unwrap();
        assert!(c.contains(h(1)) && c.contains(h(5)));
        assert_eq!(
            c.allocate(RequestId(99), &[], 3),
            Err(CacheError::OutOfBlocks {
                needed: 3,
                available: 2
            })
        );
        c.check_invariants().unwrap();
    }
    assert_eq!(
        plain(c.drain_events()),
        vec![CacheEvent::Removed {
            hashes: hs(&[2]),
            indexed: unplaced(&[2])
        }]
    );
    assert_eq!(c.cached_hashes(), hs(&[1, 5]));
}

#[test]
fn the_tail_of_a_finished_prompt_is_evicted_before_its_head() {
    let mut c = cache(5);
    run(&mut c, 1, &[1, 2, 3, 4], 5);
    // The fifth (anonymous) block was freed first, then 4, 3, 2, 1.
    assert_eq!(c.eviction_order(), hs(&[4, 3, 2, 1]));
    let mut lookups = Vec::new();
    for n in 0..5 {
        // Each new block is taken from the head of the free queue and held.
        c.allocate(RequestId(10 + n), &[], 1).unwrap();
        lookups.push(c.lookup(&hs(&[1, 2, 3, 4])));
        c.check_invariants().unwrap();
    }
    // The anonymous block goes first, then the prefix shrinks from its end.
    assert_eq!(lookups, vec![4, 3, 2, 1, 0]);
}

#[test]
fn the_event_stream_matches_every_change() {
    let mut c = PrefixCache::new(6, BS).unwrap().with_audit();
    let mut replay = CacheReplay::new();
    let mut step = |c: &mut PrefixCache, expected: Vec<CacheEvent>| {
        let events = c.drain_events();
        assert_eq!(plain(events.clone()), expected);
        for e in &events {
            replay.apply(e).unwrap();
        }
        assert_eq!(replay.sorted(), c.cached_hashes());
        c.check_invariants().unwrap();
    };
    let (r1, r2, r3) = (RequestId(1), RequestId(2), RequestId(3));
    c.allocate(r1, &hs(&[1, 2, 3]), 4).unwrap();
    step(&mut c, vec![]);
    c.commit(r1).unwrap();
    // Short prompts: positions 0, 1 and 3 are anchors; the last block of a
    // run of two or more is indexed too.
    let stored = |hashes: &[u64], parent: Option<u64>, indexed: &[u64]| CacheEvent::Stored {
        hashes: hs(hashes),
        parent: parent.map(h),
        block_size: BS,
        indexed: unplaced(indexed),
    };
    step(&mut c, vec![stored(&[1, 2, 3], None, &[1, 2, 3])]);
    assert_eq!(c.commit(r1), Ok(0));
    c.allocate(r2, &hs(&[1, 2, 7]), 3).unwrap();
    c.commit(r2).unwrap();
    step(&mut c, vec![stored(&[7], Some(2), &[])]);
    c.free(r1).unwrap();
    c.free(r2).unwrap();
    step(&mut c, vec![]);
    // Free queue: the never used block; r1's anonymous block and 3 (its
    // 1 and 2 were still held by r2); r2's 7, 2, 1. Four blocks evict 3, 7.
    c.allocate(r3, &[], 4).unwrap();
    step(
        &mut c,
        vec![CacheEvent::Removed {
            hashes: hs(&[3, 7]),
            indexed: unplaced(&[3]),
        }],
    );
    assert_eq!(c.cached_hashes(), hs(&[1, 2]));
    c.reset();
    step(&mut c, vec![CacheEvent::Cleared]);
    assert!(c.cached_hashes().is_empty());
    assert_eq!(
        c.stats().used_blocks,
        4,
        "reset does not take pinned blocks"
    );
}

#[test]
fn the_same_prefix_computed_twice_is_cached_once() {
    let mut c = cache(8);
    let (r1, r2) = (RequestId(1), RequestId(2));
    // Both allocated before either prefill completed: no hits.
    c.allocate(r1, &hs(&[2]), 1).unwrap();
    assert_eq!(c.allocate(r2, &hs(&[1, 2, 3]), 3).unwrap().hit_blocks, 0);
    c.commit(r1).unwrap();
    assert_eq!(c.commit(r2), Ok(2));
    // Short prompts: positions 0, 1 and 3 are anchors; the last block of a
    // run of two or more is indexed too.
    let stored = |hashes: &[u64], parent: Option<u64>, indexed: &[u64]| CacheEvent::Stored {
        hashes: hs(hashes),
        parent: parent.map(h),
        block_size: BS,
        indexed: unplaced(indexed),
    };
    assert_eq!(
        plain(c.drain_events()),
        vec![
            stored(&[2], None, &[2]),
            stored(&[1], None, &[1]),
            stored(&[3], Some(2), &[])
        ]
    );
    c.free(r2).unwrap();
    c.free(r1).unwrap();
    // r2's duplicate block for 2 stayed anonymous.
    assert_eq!(c.stats().cached_blocks, 3);
    assert_eq!(c.eviction_order(), hs(&[3, 1, 2]));
    c.check_invariants().unwrap();
}

#[test]
fn reset_clears_pinned_hashes_but_keeps_their_blocks() {
    let mut c = cache(4);
    let r1 = RequestId(1);
    run(&mut c, 9, &[9], 1);
    c.allocate(r1, &hs(&[1, 2]), 2).unwrap();
    c.commit(r1).unwrap();
    c.reset();
    assert!(c.cached_hashes().is_empty());
    assert_eq!(c.lookup(&hs(&[1, 2])), 0);
    assert!(c.holds(r1));
    assert_eq!(c.stats().used_blocks, 2);
    c.free(r1).unwrap();
    assert_eq!(c.stats().cached_blocks, 0);
    assert!(c.eviction_order().is_empty());
    c.check_invariants().unwrap();
    // A request allocated before the reset registers its blocks afterwards.
    let r2 = RequestId(2);
    c.allocate(r2, &hs(&[5]), 1).unwrap();
    c.reset();
    c.drain_events();
    assert_eq!(c.commit(r2), Ok(1));
    assert_eq!(c.cached_hashes(), hs(&[5]));
    c.check_invariants().unwrap();
}

#[test]
fn events_can_be_turned_off_without_losing_the_audit() {
    let mut c = cache(4);
    c.set_record_events(false);
    run(&mut c, 1, &[1, 2], 2);
    assert_eq!(c.pending_events(), 0);
    assert_eq!(c.cached_hashes(), hs(&[1, 2]));
    c.set_record_events(true);
    c.reset();
    assert_eq!(c.drain_events(), vec![CacheEvent::Cleared]);
    c.check_invariants().unwrap();
}

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
