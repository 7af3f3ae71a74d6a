//! Unit tests of the cache-aware policy.

use std::collections::BTreeSet;

use super::super::{cand, req};
use super::*;

fn ids(c: &[Candidate], order: Vec<usize>) -> Vec<String> {
    order.into_iter().map(|i| c[i].worker_id.clone()).collect()
}

fn policy() -> CacheAware {
    CacheAware::new(CacheAwareConfig::default())
}

#[test]
fn the_deepest_match_wins_at_equal_load() {
    // The first 1,024 tokens, held by two of four, count as cached on
    // all (the guard); at equal cost the real holder comes first.
    let c = vec![
        cand("a", 0, 1),
        cand("b", 4096, 1),
        cand("c", 1024, 1),
        cand("d", 0, 1),
    ];
    assert_eq!(ids(&c, policy().rank(&req(5000), &c))[..2], ["b", "c"]);
}

fn prefilling(id: &str, cached: u64, in_flight: u64, prefill_tokens: u64) -> Candidate {
    Candidate {
        prefill_tokens,
        ..cand(id, cached, in_flight)
    }
}

#[test]
fn a_match_is_weighed_against_the_prefills_in_front_of_it() {
    // 1,024 cached tokens of 1,100, at weight 3, are worth 3,072 tokens
    // of other prompts still prefilling there: less than 3,300, more
    // than 2,800.
    let c = vec![
        prefilling("hot", 1024, 2, 3300),
        cand("idle", 0, 0),
        prefilling("x", 0, 3, 500),
    ];
    assert_eq!(ids(&c, policy().rank(&req(1100), &c))[0], "idle");
    let c = vec![
        prefilling("hot", 1024, 2, 2800),
        cand("idle", 0, 0),
        cand("x", 0, 1),
    ];
    assert_eq!(ids(&c, policy().rank(&req(1100), &c))[0], "hot");
}

#[test]
fn requests_only_decoding_do_not_spill_a_match() {
    // Three requests past their first token: the batch has room, so a
    // 1.5k-token match stays where it is cached.
    let c = vec![cand("hot", 1536, 3), cand("idle", 0, 0), cand("x", 0, 0)];
    assert_eq!(ids(&c, policy().rank(&req(1600), &c))[0], "hot");
}

#[test]
fn requests_beyond_the_batch_queue() {
    // A batch of 4: the fifth and later requests wait for a place, each
    // worth 512 tokens; in flight or as the worker reports it. (No load
    // bound here: it would rule the busy worker out anyway.)
    let cfg = CacheAwareConfig {
        max_num_seqs: 4,
        epsilon: 100.0,
        ..CacheAwareConfig::default()
    };
    let p = CacheAware::new(cfg);
    let c = vec![
        cand("hot", 1024, 12),
        cand("idle", 0, 0),
        prefilling("x", 0, 1, 300),
    ];
    assert_eq!(queued_requests(&c[0], 4), 8);
    assert_eq!(batch_requests(&c[0], 4), 4);
    assert_eq!(ids(&c, p.rank(&req(1100), &c))[0], "idle");
    let c = vec![
        cand("hot", 1024, 5),
        cand("idle", 0, 0),
        prefilling("x", 0, 1, 300),
    ];
    assert_eq!(ids(&c, p.rank(&req(1100), &c))[0], "hot");
    let mut reported = cand("hot", 512, 0);
    reported.running = 4;
    reported.waiting = 5;
    assert_eq!(queued_requests(&reported, 4), 5);
    assert_eq!(queued_requests(&reported, 256), 5);
    let c = vec![reported, cand("idle", 0, 0), prefilling("x", 0, 1, 300)];
    assert_eq!(ids(&c, p.rank(&req(1100), &c))[0], "idle");
}

#[test]
fn bounded_load_spreads_a_prefix_that_every_request_shares() {
    // A huge shared prefix outweighs any queue in the cost model, but
    // with 7 in flight its holder is over ⌈1.25 × 8 / 2⌉ + 2 = 7 and
    // loses affinity; with 1 it is under ⌈1.25 × 2 / 2⌉ + 2 = 4.
    let c = vec![cand("holder", 100_000, 7), cand("other", 0, 0)];
    assert_eq!(
        ids(&c, policy().rank(&req(100_000), &c)),
        ["other", "holder"]
    );
    let c = vec![cand("holder", 100_000, 1), cand("other", 0, 0)];
    assert_eq!(
        ids(&c, policy().rank(&req(100_000), &c)),
        ["holder", "other"]
    );
}

#[test]
fn a_prefix_half_the_workers_hold_counts_as_cached_on_all() {
    // Three of four hold the 2,048-token system prompt, each prefilling
    // a question; the fourth is idle. Without the guard its prefill of
    // the prompt outweighs their questions.
    let c = vec![
        prefilling("a", 2048, 1, 100),
        prefilling("b", 2048, 1, 100),
        prefilling("c", 2048, 1, 100),
        cand("new", 0, 0),
    ];
    assert_eq!(shared_tokens(&CacheAwareConfig::default(), &c), 2048.0);
    assert_eq!(ids(&c, policy().rank(&req(2100), &c))[0], "new");
    // Held by two of four, each running a request: half, so it spreads
    // to the idle ones, by their batches.
    let c = vec![
        cand("a", 2048, 1),
        cand("b", 2048, 1),
        cand("c", 0, 0),
        cand("d", 0, 1),
    ];
    assert_eq!(shared_tokens(&CacheAwareConfig::default(), &c), 2048.0);
    assert_eq!(ids(&c, policy().rank(&req(2100), &c))[0], "c");
    // On an idle fleet a holder still wins.
    let c = vec![
        cand("a", 2048, 0),
        cand("b", 2048, 0),
        cand("c", 0, 0),
        cand("d", 0, 0),
    ];
    assert!(["a", "b"].contains(&ids(&c, policy().rank(&req(2100), &c))[0].as_str()));
    // Held by one of four, or by two of five: not shared, locality wins.
    let c = vec![
        cand("a", 2048, 1),
        cand("b", 0, 0),
        cand("c", 0, 0),
        cand("d", 0, 0),
    ];
    assert_eq!(shared_tokens(&CacheAwareConfig::default(), &c), 0.0);
    assert_eq!(ids(&c, policy().rank(&req(2100), &c))[0], "a");
    let mut five = c.clone();
    five[1].cached_tokens = 2048;
    five.push(cand("e", 0, 0));
    assert_eq!(shared_tokens(&CacheAwareConfig::default(), &five), 0.0);
    // One worker alone never makes a prefix shared.
    assert_eq!(
        shared_tokens(&CacheAwareConfig::default(), &[cand("a", 2048, 1)]),
        0.0
    );
    assert_eq!(
        shared_tokens(
            &CacheAwareConfig::default(),
            &[cand("a", 2048, 1), cand("b", 0, 0)]
        ),
        0.0
    );
}

#[test]
fn a_nearly_full_kv_cache_is_penalised() {
    let mut full = cand("full", 512, 0);
    full.kv_usage = 1.0;
    let c = vec![full, cand("roomy", 0, 0)];
    assert_eq!(ids(&c, policy().rank(&req(1000), &c)), ["roomy", "full"]);
}

#[test]
fn reported_queues_count_when_larger_than_in_flight() {
    let mut busy = cand("busy", 0, 0);
    busy.waiting = 5;
    let c = vec![busy, cand("free", 0, 1)];
    assert_eq!(ids(&c, policy().rank(&req(100), &c))[0], "free");
}

#[test]
fn misses_on_an_idle_fleet_are_spread_at_random() {
    let c: Vec<Candidate> = (0..4).map(|i| cand(&format!("w{i}"), 0, 0)).collect();
    let firsts: BTreeSet<String> = (0..200)
        .map(|_| ids(&c, policy().rank(&req(500), &c))[0].clone())
        .collect();
    assert_eq!(
        firsts.len(),
        4,
        "ties must not always pick the same worker: {firsts:?}"
    );
}

#[test]
fn a_hit_is_worth_its_tiers_weight() {
    // 1,024 tokens cached: on the GPU, on the CPU (weight 0.5), on disk
    // (0.25). Each costs its uncached share; a CPU hit beats a miss.
    let on = |id: &str, cpu: u64, disk: u64| Candidate {
        cpu_tokens: cpu,
        disk_tokens: disk,
        ..cand(id, 1024, 0)
    };
    let cfg = CacheAwareConfig::default();
    let (gpu, cpu, disk, cold) = (
        on("g", 0, 0),
        on("c", 1024, 0),
        on("d", 0, 1024),
        cand("x", 0, 0),
    );
    assert_eq!(effective_tokens(&cfg, &gpu), 1024.0);
    assert_eq!(effective_tokens(&cfg, &cpu), 512.0);
    assert_eq!(effective_tokens(&cfg, &disk), 256.0);
    // Half on the GPU, a quarter on the CPU, a quarter on disk.
    assert_eq!(
        effective_tokens(&cfg, &on("m", 256, 256)),
        512.0 + 128.0 + 64.0
    );
    let p = policy();
    let c = vec![cold.clone(), disk.clone(), cpu.clone(), gpu];
    assert_eq!(ids(&c, p.rank(&req(1100), &c)), ["g", "c", "d", "x"]);
    // Weight 1: a CPU hit is a GPU hit; weight 0: no hit at all.
    let flat = CacheAware::new(CacheAwareConfig {
        cpu_tier_weight: 1.0,
        ..cfg
    });
    assert_eq!(
        flat.cost(&req(1100), &cpu, 0.0),
        flat.cost(&req(1100), &c[3], 0.0)
    );
    let none = CacheAware::new(CacheAwareConfig {
        cpu_tier_weight: 0.0,
        ..cfg
    });
    assert_eq!(
        none.cost(&req(1100), &cpu, 0.0),
        none.cost(&req(1100), &cold, 0.0)
    );
}

#[test]
fn the_default_config_is_the_state_crates_default_params() {
    // One definition of the defaults: what `route.lua` gets from the
    // router's default config is `RouteParams::new`'s.
    let from_config = CacheAwareConfig::default().route_params(4096, 16, 7);
    let from_state = state::RouteParams::new(4096, 16, 7);
    assert_eq!(format!("{from_config:?}"), format!("{from_state:?}"));
}
