//! The KV-event stream matches every change; events can be turned off
//! without losing the audit.

use super::*;

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
