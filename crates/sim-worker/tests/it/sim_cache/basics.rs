//! The cache's calls: bad configuration and calls rejected, capacity
//! respected with no side effect on failure, lookups stopping at the first miss,
//! a prefix computed twice cached once, a reset of the pinned hashes.

use super::*;

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
