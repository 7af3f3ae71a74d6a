//! The atomic routing script against the router's Rust cache-aware policy:
//! its choice is the policy's (KV tiers included: its GPU and CPU depths are
//! the exact lookup's), and a hot prefix stays on its holders until their
//! load says otherwise, as the policy would rank them. The routing step on
//! its own (agreement between routers, spreading, hints, tips and branch
//! points) is the state suite's `route` (`crates/state/tests/it/route.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

// The routing step's helpers: one definition, the state suite's.
#[path = "../../../state/tests/it/route_helpers.rs"]
mod route_helpers;

use route_helpers::{BS, chain, params, release, ttls, worker};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use prefix_router::routing::{
    CacheAware, CacheAwareConfig, Candidate, Policy, RouteRequest, capacity, shared_tokens,
};
use proptest::prelude::*;
use protocol::{Tier, WorkerLoad};
use state::{InFlight, RouteOutcome};
use support::{M, Valkey, store};

fn config(epsilon: f64, max_num_seqs: u64) -> CacheAwareConfig {
    CacheAwareConfig {
        epsilon,
        max_num_seqs,
        ..CacheAwareConfig::default()
    }
}

/// The candidates the Rust policy would see in the script's snapshot.
fn candidates(o: &RouteOutcome) -> Vec<Candidate> {
    o.lookup
        .workers
        .iter()
        .map(|w| Candidate {
            worker_id: w.info.worker_id.clone(),
            cached_tokens: (w.matched_blocks * BS) as u64,
            cpu_tokens: (w.by_tier().cpu * BS) as u64,
            disk_tokens: (w.by_tier().disk * BS) as u64,
            in_flight: w.info.in_flight,
            prefill_tokens: w.info.prefill_tokens,
            waiting: w.info.load.num_requests_waiting,
            running: w.info.load.num_requests_running,
            kv_usage: w.info.load.kv_cache_usage_perc,
        })
        .collect()
}

/// Workers the Rust policy ranks equal-best (ties are broken by the seed).
fn rust_best(c: &[Candidate], prompt_tokens: u64, cfg: CacheAwareConfig) -> BTreeSet<String> {
    let epsilon = cfg.epsilon;
    let policy = CacheAware::new(cfg);
    let cfg = *policy.config();
    let req = RouteRequest {
        prompt_tokens,
        prefix_key: 0,
    };
    let cap = capacity(c, epsilon, CacheAwareConfig::default().load_slack);
    let shared = shared_tokens(&cfg, c);
    let key = |x: &Candidate| policy.key(x, &req, cap, shared);
    let best = c
        .iter()
        .map(key)
        .fold((2, f64::INFINITY, 0.0), |a, b| if b < a { b } else { a });
    c.iter()
        .filter(|x| key(x) == best)
        .map(|x| x.worker_id.clone())
        .collect()
}

#[derive(Debug, Clone)]
struct WorkerSpec {
    held: u64,
    /// Of the held blocks, the first ones on the GPU, then up to `cpu` on
    /// the CPU, the rest on disk (prefix-closed, as engines evict).
    gpu: u64,
    cpu: u64,
    in_flight: u64,
    /// Prefill tokens of those requests, in 64-token steps.
    prefill: u64,
    waiting: u64,
    running: u64,
    kv: f64,
}

fn spec() -> impl Strategy<Value = WorkerSpec> {
    let tiers = (0..40u64, 0..=4u64, 0..=4u64).prop_map(|(held, g, c)| {
        // Most workers hold everything on the GPU; others split it.
        let gpu = if g == 4 { held } else { held * g / 4 };
        (held, gpu, gpu + (held - gpu) * c / 4)
    });
    (tiers, 0..6u64, 0..24u64, 0..4u64, 0..6u64, 0..=100u32).prop_map(
        |((held, gpu, cpu), in_flight, prefill, waiting, running, kv)| WorkerSpec {
            held,
            gpu,
            cpu,
            in_flight,
            prefill: if in_flight == 0 { 0 } else { prefill * 64 },
            waiting,
            running,
            kv: f64::from(kv) / 100.0,
        },
    )
}

#[test]
fn the_scripts_choice_is_the_rust_policys_choice() {
    let v = Valkey::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(cfg, |(workers in prop::collection::vec(spec(), 1..5), prompt_blocks in 1..48u64,
                     eps in prop::sample::select(vec![0.0, 0.25, 1.0]), seed in 0..1_000_003u32,
                     subset in prop::option::of(1..16u32), max_seqs in prop::sample::select(vec![1u64, 3, 256]),
                     uncached_weight in prop::sample::select(vec![1.0, 1.5, 2.0]),
                     cpu_weight in prop::sample::select(vec![0.0, 0.5, 0.7, 1.0]),
                     disk_weight in prop::sample::select(vec![0.0, 0.25, 0.3]))| {
        rt.block_on(async {
            let _: () = redis::cmd("FLUSHALL").query(&mut v.conn()).unwrap();
            let s = store(&v, "rs", "router-a", ttls());
            s.router_lease(M, Duration::from_secs(120)).await.unwrap();
            let c = chain(prompt_blocks, 7);
            for (i, w) in workers.iter().enumerate() {
                let id = format!("w{i}");
                let load = WorkerLoad { num_requests_waiting: w.waiting, num_requests_running: w.running, kv_cache_usage_perc: w.kv };
                worker(&s, &id, Some(load)).await;
                let held = chain(w.held, 7);
                let (gpu, cpu) = (w.gpu as usize, w.cpu as usize);
                s.stored_on(M, &id, &held[..gpu], Tier::Gpu).await.unwrap();
                s.stored_on(M, &id, &held[gpu..cpu], Tier::Cpu).await.unwrap();
                s.stored_on(M, &id, &held[cpu..], Tier::Disk).await.unwrap();
                let counted = InFlight { requests: w.in_flight as i64, prefill_tokens: w.prefill as i64 };
                s.change_in_flight(M, &id, counted).await.unwrap();
            }
            let prompt_tokens = prompt_blocks * BS as u64 + 5;
            // Explain's lookup, before the route claims anything.
            let exact = s.probe_with_gaps(M, &c).await.unwrap();
            // A gateway's subset: only these may be chosen (all if none is).
            let allowed: Vec<String> = (0..workers.len())
                .filter(|i| subset.is_some_and(|m| m & (1 << i) != 0))
                .map(|i| format!("w{i}"))
                .collect();
            let cfg = CacheAwareConfig {
                uncached_weight,
                cpu_tier_weight: cpu_weight,
                disk_tier_weight: disk_weight,
                ..config(eps, max_seqs)
            };
            let o = s
                .route(M, &c, &cfg.route_params(prompt_tokens, BS, seed), &[], &allowed)
                .await
                .unwrap();
            // Probing (route.lua) finds the depths explain's lookup finds,
            // per tier too.
            let depths = |l: &state::PrefixProbe| -> BTreeMap<String, (usize, usize, usize)> {
                l.workers
                    .iter()
                    .map(|w| (w.info.worker_id.clone(), (w.matched_blocks, w.gpu_blocks, w.cpu_blocks)))
                    .collect()
            };
            assert_eq!(depths(&o.lookup), depths(&exact));
            let chosen = &o.lookup.workers[o.chosen.unwrap()].info.worker_id;
            let among: Vec<Candidate> = candidates(&o)
                .into_iter()
                .filter(|c| allowed.is_empty() || allowed.contains(&c.worker_id))
                .collect();
            let best = rust_best(&among, prompt_tokens, cfg);
            assert!(best.contains(chosen), "script chose {chosen}, Rust's best are {best:?} (allowed {allowed:?})");
            // The chosen worker's prefill is counted: the prompt beyond its
            // real match, on top of what it had.
            let before = workers[chosen[1..].parse::<usize>().unwrap()].prefill;
            let real = o.lookup.workers[o.chosen.unwrap()].matched_blocks as u64 * BS as u64;
            assert_eq!(o.prefill_tokens, prompt_tokens.saturating_sub(real));
            let after = s.probe(M, &c).await.unwrap();
            let now = after.workers.iter().find(|w| &w.info.worker_id == chosen).unwrap();
            assert_eq!(now.info.prefill_tokens, before + o.prefill_tokens);
        });
    });
}

/// The hotspot guard counts a prefix most workers hold as cached on all,
/// but at equal cost a holder wins: on an idle fleet a document two of
/// three workers hold stays on them; once both are busy, the third takes it.
#[tokio::test]
async fn a_hot_prefix_stays_on_its_holders_until_their_load_says_otherwise() {
    let v = Valkey::start();
    let s = store(&v, "rs", "router-a", ttls());
    s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    for i in 0..3 {
        worker(&s, &format!("w{i}"), None).await;
    }
    let document = chain(40, 9);
    s.stored(M, "w0", &document).await.unwrap();
    s.stored(M, "w1", &document).await.unwrap();
    let tokens = 40 * BS as u64 + 20;
    for i in 0..30u32 {
        let o = s
            .route(M, &document, &params(tokens, 0.25, i * 7919), &[], &[])
            .await
            .unwrap();
        let chosen = &o.lookup.workers[o.chosen.unwrap()];
        let id = chosen.info.worker_id.clone();
        assert!(id == "w0" || id == "w1", "request {i} went to {id}");
        // The Rust policy agrees (explain ranks with it).
        let ranked = CacheAware::new(CacheAwareConfig::default()).rank(
            &RouteRequest {
                prompt_tokens: tokens,
                prefix_key: 0,
            },
            &candidates(&o),
        );
        assert_ne!(candidates(&o)[ranked[0]].worker_id, "w2");
        release(&s, &o).await;
    }
    // Both holders running a request: the document, held by two of three,
    // counts as cached on all, and the third, whose batch is empty, takes
    // it.
    s.change_in_flight(M, "w0", state::InFlight::requests(1))
        .await
        .unwrap();
    s.change_in_flight(M, "w1", state::InFlight::requests(1))
        .await
        .unwrap();
    let o = s
        .route(M, &document, &params(tokens, 0.25, 1), &[], &[])
        .await
        .unwrap();
    assert_eq!(o.lookup.workers[o.chosen.unwrap()].info.worker_id, "w2");
}
