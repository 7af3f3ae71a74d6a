//! Admission and the queue: FIFO beyond `max_num_seqs`, a head waiting for
//! blocks, output blocks reserved, aborts, invalid requests refused, reset and
//! events through the engine.

use super::*;

#[test]
fn requests_queue_beyond_max_num_seqs_and_are_admitted_in_fifo_order() {
    let mut e = engine(1.0, 2, 64);
    let a = admitted(e.submit(req(1, 1, 8, 3), at(0))); // done at 20
    let b = admitted(e.submit(req(2, 2, 4, 1), at(0))); // done at 6
    assert_eq!((a.done_at, b.done_at), (at(20), at(6)));
    for (i, id) in [3, 4, 5].into_iter().enumerate() {
        let t = e.submit(req(id, id, 4, 1), at(1)).unwrap();
        assert_eq!(t, Ticket::Queued { position: i });
    }
    let g = e.gauges();
    assert_eq!((g.num_requests_running, g.num_requests_waiting), (2, 3));
    assert_eq!(e.next_event_time(), Some(at(6)));

    // Advancing far at once still admits each at the instant a slot freed.
    e.advance(at(100));
    let order: Vec<(u64, Duration)> = e
        .take_admitted()
        .iter()
        .map(|a| (a.id.0, a.admitted_at))
        .collect();
    // 3 takes b's slot at 6 (done at 12), 4 takes 3's at 12 (done at 18),
    // 5 takes 4's at 18: a's slot (20) comes later.
    assert_eq!(order, vec![(3, at(6)), (4, at(12)), (5, at(18))]);
    let finished: Vec<(u64, Duration)> = e
        .take_finished()
        .iter()
        .map(|f| (f.id.0, f.finished_at))
        .collect();
    assert_eq!(
        finished,
        vec![
            (2, at(6)),
            (3, at(12)),
            (4, at(18)),
            (1, at(20)),
            (5, at(24))
        ]
    );
    assert_eq!(e.gauges().num_requests_running, 0);
    assert_eq!(e.next_event_time(), None);
    e.check_invariants().unwrap();
}

#[test]
fn a_waiting_head_that_needs_more_blocks_blocks_those_behind_it() {
    // 6 blocks of 4 tokens.
    let mut e = engine(1.0, 8, 6);
    admitted(e.submit(req(1, 1, 16, 1), at(0))); // 4 blocks, done at 18
    let big = e.submit(req(2, 2, 16, 1), at(1)).unwrap();
    let small = e.submit(req(3, 3, 4, 1), at(1)).unwrap();
    assert_eq!(big, Ticket::Queued { position: 0 });
    assert_eq!(small, Ticket::Queued { position: 1 }, "FCFS: no overtaking");
    let g = e.gauges();
    assert!((g.kv_cache_usage_perc - 4.0 / 6.0).abs() < 1e-12);
    e.advance(at(18));
    let order: Vec<u64> = e.take_admitted().iter().map(|a| a.id.0).collect();
    assert_eq!(order, vec![2, 3]);
    assert!((e.gauges().kv_cache_usage_perc - 5.0 / 6.0).abs() < 1e-12);
    e.check_invariants().unwrap();
}

#[test]
fn output_blocks_are_reserved_at_admission() {
    let mut e = engine(1.0, 8, 10);
    // KV of 8 + 9 - 1 = 16 tokens: 4 blocks, 2 of them for output.
    admitted(e.submit(req(1, 1, 8, 9), at(0)));
    assert!((e.gauges().kv_cache_usage_perc - 0.4).abs() < 1e-12);
    assert!(matches!(
        e.submit(req(2, 2, 8, 40), at(0)),
        Err(EngineError::TooLarge {
            blocks: 12,
            capacity: 10,
            ..
        })
    ));
}

#[test]
fn abort_frees_blocks_and_lets_the_queue_move() {
    let mut e = engine(1.0, 1, 64);
    let a = admitted(e.submit(req(1, 1, 8, 5), at(0))); // first token at 10
    e.submit(req(2, 2, 8, 1), at(1)).unwrap();
    e.submit(req(3, 3, 8, 1), at(1)).unwrap();
    // Aborting the waiting 3 leaves 2 at the head.
    let f3 = e.abort(RequestId(3), at(2)).unwrap();
    assert_eq!(
        (f3.reason, f3.admission, f3.submitted_at),
        (FinishReason::Aborted, None, at(1))
    );
    assert!(!e.is_waiting(RequestId(3)));
    // Aborting 1 during its prefill: nothing of it gets cached, 2 runs now.
    let f1 = e.abort(RequestId(1), at(5)).unwrap();
    assert_eq!((f1.finished_at, f1.admission), (at(5), Some(a)));
    let next = e.take_admitted();
    assert_eq!((next[0].id, next[0].admitted_at), (RequestId(2), at(5)));
    e.advance(at(1000));
    let cached = e.cache().cached_hashes();
    assert_eq!(cached, vec![BlockHash(2000), BlockHash(2001)]);
    assert_eq!(
        e.abort(RequestId(2), at(1000)),
        Err(EngineError::UnknownRequest(RequestId(2)))
    );
    let c = e.counters();
    assert_eq!(
        (c.submitted, c.admitted, c.completed, c.aborted),
        (3, 2, 1, 2)
    );
    e.check_invariants().unwrap();
}

#[test]
fn invalid_requests_are_refused_without_side_effects() {
    let mut e = engine(1.0, 2, 16);
    let bad = |mut r: SimRequest, f: fn(&mut SimRequest)| {
        f(&mut r);
        r
    };
    for r in [
        bad(req(1, 1, 8, 1), |r| r.prompt_tokens = 0),
        bad(req(1, 1, 8, 1), |r| r.output_tokens = 0),
        bad(req(1, 1, 8, 1), |r| r.prompt_tokens = 7),
        bad(req(1, 1, 8, 1), |r| r.block_hashes[1] = r.block_hashes[0]),
    ] {
        assert!(matches!(
            e.submit(r, at(0)),
            Err(EngineError::InvalidRequest { .. })
        ));
    }
    assert_eq!(e.counters().submitted, 0);
    admitted(e.submit(req(1, 1, 8, 1), at(0)));
    assert_eq!(
        e.submit(req(1, 2, 8, 1), at(0)),
        Err(EngineError::DuplicateRequest(RequestId(1)))
    );
    assert!(matches!(
        Engine::new(EngineConfig {
            max_num_seqs: 0,
            ..config(1.0, 1, 16)
        }),
        Err(EngineError::InvalidConfig(_))
    ));
    assert!(matches!(
        Engine::new(config(0.0, 1, 16)),
        Err(EngineError::TimeModel(_))
    ));
    assert!(matches!(
        Engine::new(config(1.0, 1, 0)),
        Err(EngineError::Cache(_))
    ));
}

#[test]
fn reset_and_events_flow_through_the_engine() {
    let mut e = engine(1.0, 2, 16);
    admitted(e.submit(req(1, 1, 8, 1), at(0)));
    e.advance(at(100));
    let stored = CacheEvent::Stored {
        hashes: vec![BlockHash(1000), BlockHash(1001)],
        parent: None,
        block_size: BS,
        // Positions 0 and 1 are anchors, in the family of the first block.
        indexed: [1000, 1001]
            .map(|n| protocol::family::FamilyBlock::new(BlockHash(n), Some(BlockHash(1000))))
            .to_vec(),
    };
    assert_eq!(e.drain_cache_events(), vec![stored]);
    e.reset_prefix_cache(at(101));
    assert_eq!(e.drain_cache_events(), vec![CacheEvent::Cleared]);
    let b = admitted(e.submit(req(2, 1, 8, 1), at(102)));
    assert_eq!(b.cached_tokens, 0);
    assert_eq!(e.now(), at(102));
    // Time never goes back.
    e.advance(at(50));
    assert_eq!(e.now(), at(102));
    e.check_invariants().unwrap();
}
