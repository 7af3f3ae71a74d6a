//! `sim::Engine`: time model arithmetic, admission, FIFO queueing, aborts
//! and gauges.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::time::Duration;

use protocol::hashing::BlockHash;
use sim_worker::{
    Admission, CacheEvent, Engine, EngineConfig, EngineError, FinishReason, PrefillSharing,
    RequestId, SimRequest, Ticket, TimeModel,
};

const BS: usize = 4;
const MS: Duration = Duration::from_millis(1);

/// 1 ms per uncached prompt token, 10 µs per cached one, 2 ms overhead,
/// 5 ms per decode step.
fn config(scale: f64, max_num_seqs: usize, num_blocks: usize) -> EngineConfig {
    EngineConfig {
        time: TimeModel {
            prefill_per_token: MS,
            prefill_per_cached_token: Duration::from_micros(10),
            request_overhead: 2 * MS,
            decode_per_token: 5 * MS,
            time_scale: scale,
        },
        family_blocks: 1,
        max_num_seqs,
        num_blocks,
        block_size: BS,
        // Most tests here time one request at a time; serial prefills have
        // their own test.
        prefill: PrefillSharing::Parallel,
    }
}

fn engine(scale: f64, max_num_seqs: usize, num_blocks: usize) -> Engine {
    Engine::new(config(scale, max_num_seqs, num_blocks))
        .unwrap()
        .with_audit()
}

/// A request whose full blocks are hashed `family * 1000 + i`.
fn req(id: u64, family: u64, prompt_tokens: usize, output_tokens: usize) -> SimRequest {
    let full = (prompt_tokens / BS) as u64;
    SimRequest {
        id: RequestId(id),
        block_hashes: (0..full).map(|i| BlockHash(family * 1000 + i)).collect(),
        prompt_tokens,
        output_tokens,
    }
}

fn admitted(t: Result<Ticket, EngineError>) -> Admission {
    match t {
        Ok(Ticket::Admitted(a)) => a,
        other => panic!("expected an admission, got {other:?}"),
    }
}

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

#[test]
fn prefill_costs_uncached_tokens_and_the_cache_fills_at_first_token() {
    let mut e = engine(1.0, 8, 64);
    let a = admitted(e.submit(req(1, 7, 40, 3), at(0)));
    // 40 uncached tokens: 2 + 40 ms; then 2 decode steps.
    assert_eq!(a.cached_tokens, 0);
    assert_eq!((a.first_token_at, a.done_at), (at(42), at(52)));
    assert_eq!((a.queue_wait(), a.ttft(), a.e2e()), (at(0), at(42), at(52)));

    // Submitted during the first one's prefill: nothing is cached yet.
    let b = admitted(e.submit(req(2, 7, 40, 1), at(41)));
    assert_eq!(b.cached_tokens, 0);
    assert!(e.cache().cached_hashes().is_empty());
    e.advance(at(42));
    assert_eq!(e.cache().cached_hashes().len(), 10);

    // The same 40-token prompt again: 9 of its 10 blocks count as cached,
    // since the last prompt token is always computed (as in vLLM).
    let c = admitted(e.submit(req(3, 7, 40, 1), at(50)));
    assert_eq!((c.cached_tokens, c.uncached_tokens()), (36, 4));
    assert_eq!(
        c.prefill_time(),
        2 * MS + 4 * MS + 36 * Duration::from_micros(10)
    );
    // A longer prompt sharing the 10 blocks: all 40 cached, 3 to compute.
    let d = admitted(e.submit(req(4, 7, 43, 1), at(50)));
    assert_eq!((d.cached_tokens, d.uncached_tokens()), (40, 3));
    assert_eq!(
        d.prefill_time(),
        2 * MS + 3 * MS + 40 * Duration::from_micros(10)
    );
    // Prefill grows by exactly 1 ms per uncached token.
    let e2 = admitted(e.submit(req(5, 8, 43, 1), at(50)));
    assert_eq!(
        e2.prefill_time() - d.prefill_time(),
        40 * MS - 40 * Duration::from_micros(10)
    );
    assert_eq!(e.counters().cached_tokens, 76);
    assert_eq!(e.counters().prompt_tokens, 40 + 40 + 40 + 43 + 43);
    e.check_invariants().unwrap();
}

#[test]
fn the_time_scale_applies_to_every_duration() {
    let (mut real, mut fast) = (engine(1.0, 1, 64), engine(0.1, 1, 64));
    let mut pairs = Vec::new();
    for (id, prompt, out) in [(1, 40, 3), (2, 17, 20), (3, 40, 1)] {
        real.submit(req(id, 1, prompt, out), at(0)).unwrap();
        fast.submit(req(id, 1, prompt, out), at(0)).unwrap();
    }
    real.advance(at(10_000));
    fast.advance(at(1_000));
    for (r, f) in real.take_finished().iter().zip(fast.take_finished()) {
        pairs.push((r.admission.unwrap(), f.admission.unwrap()));
    }
    assert_eq!(pairs.len(), 3);
    for (r, f) in pairs {
        assert_eq!(r.cached_tokens, f.cached_tokens);
        assert_eq!(f.prefill_time() * 10, r.prefill_time());
        assert_eq!(f.queue_wait() * 10, r.queue_wait());
        assert_eq!(f.e2e() * 10, r.e2e());
    }
}

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
fn results_do_not_depend_on_how_often_the_clock_advances() {
    let script: Vec<(u64, u64, usize, usize, u64)> = vec![
        (1, 1, 12, 4, 0),
        (2, 1, 16, 2, 3),
        (3, 2, 9, 7, 4),
        (4, 1, 12, 1, 5),
        (5, 3, 30, 3, 9),
        (6, 2, 9, 2, 30),
    ];
    let run = |step_ms: u64| {
        let mut e = engine(1.0, 2, 14);
        let mut clock = 0;
        for &(id, family, prompt, out, t) in &script {
            while clock + step_ms < t {
                clock += step_ms;
                e.advance(at(clock));
            }
            e.submit(req(id, family, prompt, out), at(t)).unwrap();
            e.check_invariants().unwrap();
        }
        while let Some(t) = e.next_event_time() {
            e.advance(t);
            e.check_invariants().unwrap();
        }
        (e.take_finished(), e.cache().cached_hashes())
    };
    let (coarse, fine) = (run(1000), run(1));
    assert_eq!(coarse, fine);
    assert_eq!(coarse.0.len(), 6);
    // Request 4 repeats request 1's prompt after 1 completed: a cache hit.
    let four = coarse.0.iter().find(|f| f.id == RequestId(4)).unwrap();
    assert_eq!(four.admission.unwrap().cached_tokens, 8);
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
fn tokens_stream_evenly_from_first_token_to_done() {
    let mut e = engine(1.0, 1, 16);
    let a = admitted(e.submit(req(1, 1, 4, 4), at(0)));
    let times: Vec<Duration> = (0..6).map(|i| a.token_at(i)).collect();
    assert_eq!(times, vec![at(6), at(11), at(16), at(21), at(21), at(21)]);
    assert_eq!(e.admission(RequestId(1)), Some(&a));
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

#[test]
fn a_zero_cost_model_completes_requests_at_once() {
    let mut cfg = config(1.0, 1, 16);
    cfg.time = TimeModel {
        prefill_per_token: Duration::ZERO,
        prefill_per_cached_token: Duration::ZERO,
        request_overhead: Duration::ZERO,
        decode_per_token: Duration::ZERO,
        time_scale: 1.0,
    };
    let mut e = Engine::new(cfg).unwrap().with_audit();
    let a = admitted(e.submit(req(1, 1, 8, 3), at(5)));
    assert_eq!((a.first_token_at, a.done_at), (at(5), at(5)));
    assert_eq!(e.gauges().num_requests_running, 0);
    assert_eq!(e.cache().cached_hashes().len(), 2);
    e.check_invariants().unwrap();
    // The single slot is free again at once, and the prompt is cached.
    let b = admitted(e.submit(req(2, 1, 8, 3), at(5)));
    assert_eq!(b.cached_tokens, 4);
    assert_eq!(e.take_finished().len(), 2);
    assert_eq!(e.next_event_time(), None);
}

#[test]
fn serial_prefills_queue_behind_the_tokens_admitted_before() {
    // 40- and 20-token prompts of other families, then a fully new one:
    // with serial prefills each first token waits for the prefills before.
    let serial = EngineConfig {
        prefill: PrefillSharing::Serial,
        ..config(1.0, 8, 64)
    };
    let mut e = Engine::new(serial).unwrap();
    let a = admitted(e.submit(req(1, 1, 40, 4), at(0)));
    let b = admitted(e.submit(req(2, 2, 20, 4), at(0)));
    let c = admitted(e.submit(req(3, 3, 8, 4), at(10)));
    // 2 ms overhead + 1 ms per uncached token.
    assert_eq!(a.first_token_at, at(42));
    assert_eq!(b.first_token_at, at(42 + 22));
    assert_eq!(
        c.first_token_at,
        at(64 + 10),
        "waits for both, not only its own 10 ms"
    );
    assert_eq!(c.ttft(), at(64));
    // Once the prefill server is idle, a request starts at once.
    let d = admitted(e.submit(req(4, 4, 8, 1), at(200)));
    assert_eq!(d.first_token_at, at(210));
    // The same requests in parallel: each only pays its own prefill.
    let mut p = engine(1.0, 8, 64);
    admitted(p.submit(req(1, 1, 40, 4), at(0)));
    admitted(p.submit(req(2, 2, 20, 4), at(0)));
    let c = admitted(p.submit(req(3, 3, 8, 4), at(10)));
    assert_eq!(c.first_token_at, at(20));
}

#[test]
fn by_default_prefills_share_one_gpu() {
    // Only the time model given: the default engine queues a prefill
    // behind the uncached tokens admitted before it (vLLM's one GPU).
    let default = EngineConfig {
        prefill: EngineConfig::default().prefill,
        ..config(1.0, 8, 64)
    };
    assert_eq!(default.prefill, PrefillSharing::Serial);
    let mut e = Engine::new(default).unwrap().with_audit();
    let a = admitted(e.submit(req(1, 1, 40, 4), at(0)));
    let b = admitted(e.submit(req(2, 2, 8, 4), at(0)));
    assert_eq!(a.first_token_at, at(42));
    assert_eq!(
        b.first_token_at,
        at(42 + 10),
        "after a's prefill, not at 10 ms"
    );
    e.check_invariants().unwrap();
}
