//! The time model: prefill costs the uncached tokens, the time scale,
//! results independent of the clock's steps, tokens streamed evenly, a
//! zero-cost model, serial and shared prefills.

use super::*;

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
fn tokens_stream_evenly_from_first_token_to_done() {
    let mut e = engine(1.0, 1, 16);
    let a = admitted(e.submit(req(1, 1, 4, 4), at(0)));
    let times: Vec<Duration> = (0..6).map(|i| a.token_at(i)).collect();
    assert_eq!(times, vec![at(6), at(11), at(16), at(21), at(21), at(21)]);
    assert_eq!(e.admission(RequestId(1)), Some(&a));
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
