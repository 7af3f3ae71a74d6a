//! Eviction: free blocks least recently used first, pinned blocks never,
//! a finished prompt's tail before its head.

use super::*;

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
