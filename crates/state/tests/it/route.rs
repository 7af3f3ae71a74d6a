//! The atomic routing step (`route.lua`, `StateStore::route` and
//! `route_chain`) on its own: concurrent routers agree on one worker for a
//! new prefix, misses spread evenly, bounded load spreads a hot prefix,
//! hints extend matches past one call's head, every change to the fleet is
//! seen, tips and branch points are credited, and only queued prefill
//! spills a match. Its choice against the router's Rust policy:
//! `crates/router/tests/it/route_script.rs`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::route_helpers::{BS, chain, params, release, ttls, worker};
use protocol::WorkerLoad;
use protocol::hashing::BlockHash;
use state::{InFlight, StateStore, StateTtls, WorkerHeartbeat};
use support::{M, Valkey, store};

#[tokio::test]
async fn concurrent_routers_agree_on_one_worker_for_a_new_prefix() {
    let v = Valkey::start();
    let (a, b) = (
        store(&v, "rs", "router-a", ttls()),
        store(&v, "rs", "router-b", ttls()),
    );
    for i in 0..3 {
        worker(&a, &format!("w{i}"), None).await;
    }
    let c = chain(20, 99);
    let mut tasks = Vec::new();
    for i in 0..32u32 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        let c = c.clone();
        // Locality only (no queue cost, no load bound): this test is about
        // the script serialising concurrent choices, not about spreading.
        // The prompt is whole blocks: a follower adds no prefill of its own
        // to the first one's, so it costs the same there as anywhere, and
        // at equal cost the holder wins.
        let mut p = params(320, 1000.0, i * 7919);
        p.tokens_per_queued_request = 0.0;
        p.tokens_per_running_request = 0.0;
        tasks.push(tokio::spawn(async move {
            let o = s.route(M, &c, &p, &[], &[]).await.unwrap();
            o.lookup.workers[o.chosen.unwrap()].info.worker_id.clone()
        }));
    }
    let mut chosen = BTreeSet::new();
    for t in tasks {
        chosen.insert(t.await.unwrap());
    }
    assert_eq!(
        chosen.len(),
        1,
        "routers split a new prefix over {chosen:?}"
    );
}

#[tokio::test]
async fn misses_on_an_idle_fleet_are_spread_evenly() {
    let v = Valkey::start();
    let s = store(&v, "rs", "router-a", ttls());
    for i in 0..4 {
        worker(&s, &format!("w{i}"), None).await;
    }
    let mut per_worker = BTreeMap::<String, u32>::new();
    for i in 0..200u64 {
        // A new prefix every time, on an idle fleet: every worker ties.
        let seed = ((i * 2_654_435_761) % 1_000_003) as u32;
        let o = s
            .route(M, &chain(2, 10_000 + i), &params(100, 0.25, seed), &[], &[])
            .await
            .unwrap();
        let id = o.lookup.workers[o.chosen.unwrap()].info.worker_id.clone();
        release(&s, &o).await;
        *per_worker.entry(id).or_default() += 1;
    }
    // Each worker's expected share is 50 of 200; a tie-break that favours
    // the first position gives it most of them.
    assert_eq!(per_worker.len(), 4, "{per_worker:?}");
    assert!(
        per_worker.values().all(|&n| (25..=75).contains(&n)),
        "uneven: {per_worker:?}"
    );
}

#[tokio::test]
async fn bounded_load_spreads_a_prefix_every_request_shares() {
    let v = Valkey::start();
    let s = store(&v, "rs", "router-a", ttls());
    for i in 0..4 {
        worker(&s, &format!("w{i}"), None).await;
    }
    let system_prompt = chain(30, 5);
    let mut per_worker = std::collections::BTreeMap::<String, u32>::new();
    for i in 0..40u32 {
        // Requests stay in flight: the load builds up.
        let o = s
            .route(M, &system_prompt, &params(500, 0.25, i), &[], &[])
            .await
            .unwrap();
        *per_worker
            .entry(o.lookup.workers[o.chosen.unwrap()].info.worker_id.clone())
            .or_default() += 1;
    }
    let max = *per_worker.values().max().unwrap();
    assert_eq!(per_worker.len(), 4, "{per_worker:?}");
    assert!(
        max <= 15,
        "one worker took {max} of 40 (bound ⌈1.25 × 40 / 4⌉ + 2 = 15): {per_worker:?}"
    );
}

#[tokio::test]
async fn hints_extend_matches_beyond_one_calls_head() {
    let v = Valkey::start();
    let s = store(&v, "rs", "router-a", ttls());
    let long = chain(1300, 3);
    for (id, held) in [("short", 1030usize), ("long", 1290)] {
        worker(&s, id, None).await;
        s.stored(M, id, &long[..held]).await.unwrap();
    }
    let head = &long[..1024];
    let p = params(1300 * BS as u64, 0.25, 1);
    let without = s.route(M, head, &p, &[], &[]).await.unwrap();
    assert_eq!(
        without
            .lookup
            .workers
            .iter()
            .map(|w| w.matched_blocks)
            .max(),
        Some(1024)
    );
    release(&s, &without).await;
    let hints = vec![("short".to_owned(), 6), ("long".to_owned(), 266)];
    let with = s.route(M, head, &p, &hints, &[]).await.unwrap();
    assert_eq!(
        with.lookup.workers[with.chosen.unwrap()].info.worker_id,
        "long"
    );
}

/// The whole decision in one store call: `route_chain` probes past the
/// head itself, chooses the worker holding the longest chain, reports each
/// worker's whole match (as a full probe does), and leaves the rest of the
/// chosen worker's unheld chain (at most) to claim.
#[tokio::test]
async fn route_chain_is_the_head_route_with_the_probes_hints() {
    let v = Valkey::start();
    let s = store(&v, "rc", "router-a", ttls());
    let long = chain(1300, 3);
    for (id, held) in [("short", 1030usize), ("long", 1290)] {
        worker(&s, id, None).await;
        s.stored(M, id, &long[..held]).await.unwrap();
    }
    let probe = s.probe(M, &long).await.unwrap();
    let p = params(1300 * BS as u64, 0.25, 1);
    let o = s.route_chain(M, &long, &p, &[]).await.unwrap();
    let chosen = &o.lookup.workers[o.chosen.unwrap()];
    assert_eq!(chosen.info.worker_id, "long");
    let depth = |ws: &[state::WorkerMatch], id: &str| {
        ws.iter()
            .find(|w| w.info.worker_id == id)
            .map(|w| (w.matched_blocks, w.by_tier()))
    };
    for id in ["short", "long"] {
        assert_eq!(
            depth(&o.lookup.workers, id),
            depth(&probe.workers, id),
            "{id}"
        );
    }
    // Left to claim: at most the part of the chain the chosen worker
    // does not hold (nothing it holds is claimed again).
    assert!(
        (1290..=long.len()).contains(&o.tail_from),
        "{}",
        o.tail_from
    );
    release(&s, &o).await;
}

/// Who the routing step sees, by worker id, with its waiting count and
/// requests in flight.
async fn seen(s: &StateStore, c: &[BlockHash]) -> BTreeMap<String, (u64, u64)> {
    let o = s
        .route(M, c, &params(100, 1000.0, 1), &[], &[])
        .await
        .unwrap();
    // Release what the route counted, so that each probe leaves no load.
    release(s, &o).await;
    o.lookup
        .workers
        .iter()
        .map(|w| {
            let i = &w.info;
            (
                i.worker_id.clone(),
                (i.load.num_requests_waiting, i.in_flight),
            )
        })
        .collect()
}

/// route.lua reuses its parse of the routing view across calls; every
/// change to the view must still show in the next call.
#[tokio::test]
async fn the_routing_step_sees_every_change_to_the_fleet() {
    let v = Valkey::start();
    let s = store(&v, "rs", "router-a", ttls());
    let c = chain(4, 3);
    worker(&s, "w0", None).await;
    worker(&s, "w1", None).await;
    let ids = |m: &BTreeMap<String, (u64, u64)>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(ids(&seen(&s, &c).await), ["w0", "w1"]);
    // A load report rewrites a record.
    let load = WorkerLoad {
        num_requests_waiting: 7,
        num_requests_running: 1,
        kv_cache_usage_perc: 0.5,
    };
    worker(&s, "w1", Some(load)).await;
    assert_eq!(seen(&s, &c).await["w1"].0, 7);
    // A new worker, a deregistered one.
    worker(&s, "w2", None).await;
    assert_eq!(ids(&seen(&s, &c).await), ["w0", "w1", "w2"]);
    assert!(s.deregister(M, "w0").await.unwrap());
    assert_eq!(ids(&seen(&s, &c).await), ["w1", "w2"]);
    // In-flight counts of this router, then of another router whose lease
    // ends.
    s.change_in_flight(M, "w2", state::InFlight::requests(3))
        .await
        .unwrap();
    assert_eq!(seen(&s, &c).await["w2"].1, 3);
    let other = store(&v, "rs", "router-b", ttls());
    other
        .router_lease(M, Duration::from_millis(300))
        .await
        .unwrap();
    other
        .change_in_flight(M, "w1", state::InFlight::requests(2))
        .await
        .unwrap();
    assert_eq!(seen(&s, &c).await["w1"].1, 2);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(seen(&s, &c).await["w1"].1, 0);
    // A lease that runs out, with nothing else changing in the view.
    let short = store(
        &v,
        "rs",
        "router-a",
        StateTtls {
            worker_lease: Duration::from_millis(300),
            ..ttls()
        },
    );
    short
        .heartbeat(
            M,
            &WorkerHeartbeat {
                worker_id: "w3".into(),
                url: "http://127.0.0.1:9".into(),
                load: None,
            },
        )
        .await
        .unwrap();
    assert!(seen(&s, &c).await.contains_key("w3"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(ids(&seen(&s, &c).await), ["w1", "w2"]);
}

/// A worker's report of a chain of `n` blocks stored in one run: its
/// indexed blocks (anchors and the tip), as reporters and sims send them.
fn reported(c: &[BlockHash]) -> Vec<BlockHash> {
    protocol::index::indexed_positions(c.len())
        .map(|p| c[p])
        .collect()
}

/// What the routing step, explain's lookup and the plain lookup credit
/// worker "w" with (the lookups first: the route claims the prompt).
async fn credited(s: &StateStore, prompt: &[BlockHash]) -> (usize, usize, usize) {
    let exact = s.probe_with_gaps(M, prompt).await.unwrap();
    let plain = s.probe(M, prompt).await.unwrap();
    let o = s
        .route(
            M,
            prompt,
            &params(prompt.len() as u64 * 16, 0.25, 1),
            &[],
            &[],
        )
        .await
        .unwrap();
    let chosen = &o.lookup.workers[o.chosen.unwrap()];
    assert_eq!(chosen.info.worker_id, "w");
    release(s, &o).await;
    (
        chosen.matched_blocks,
        exact.workers[0].matched_blocks,
        plain.workers[0].matched_blocks,
    )
}

#[tokio::test]
async fn tips_and_branch_points_between_anchors_are_credited() {
    let v = Valkey::start();
    let s = store(&v, "gaps", "router-a", ttls());
    worker(&s, "w", None).await;
    // An earlier prompt of 24 blocks: anchors end 1, 2, 4, 8, 16 blocks;
    // its tip is block 24.
    let earlier = chain(24, 5);
    s.stored(M, "w", &reported(&earlier)).await.unwrap();
    // A later turn of the same conversation: 24 blocks shared, 6 new.
    let mut later = earlier.clone();
    later.extend(chain(6, 6));
    assert_eq!(credited(&s, &later).await, (24, 24, 16));

    // A prompt that shares 13 blocks (a system prompt) and branches: block
    // 13 is no anchor and no tip, so only 8 are seen...
    let mut branch = earlier[..13].to_vec();
    branch.extend(chain(17, 7));
    assert_eq!(credited(&s, &branch).await, (8, 8, 8));
    // ...until a worker reports the branch point (its prefill grew from
    // block 13), as the one above just did.
    let bp = protocol::index::branch_point(13, 17).unwrap();
    s.stored(M, "w", &[earlier[bp]]).await.unwrap();
    let mut other = earlier[..13].to_vec();
    other.extend(chain(17, 8));
    assert_eq!(credited(&s, &other).await, (13, 13, 8));
}

/// Issue 13's defect: three requests in flight on the holder of a 1.5k-token
/// prefix spilled it to a cold worker. Requests past their first token cost
/// only their place in the batch; prefills queued there still spill it.
#[tokio::test]
async fn only_queued_prefill_spills_a_match() {
    let v = Valkey::start();
    let s = store(&v, "rs", "router-a", ttls());
    s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    for i in 0..3 {
        worker(&s, &format!("w{i}"), None).await;
    }
    let document = chain(96, 21);
    s.stored(M, "w0", &document).await.unwrap();
    let tokens = 96 * BS as u64 + 7;
    s.change_in_flight(M, "w0", state::InFlight::requests(3))
        .await
        .unwrap();
    let o = s
        .route(M, &document, &params(tokens, 0.25, 5), &[], &[])
        .await
        .unwrap();
    assert_eq!(o.lookup.workers[o.chosen.unwrap()].info.worker_id, "w0");
    assert_eq!(o.prefill_tokens, 7, "only the partial last block is new");
    release(&s, &o).await;
    // 6,000 tokens of other prompts still prefilling there: more than a
    // cold worker's prefill of the whole prompt at weight 3 (4,629).
    s.change_in_flight(M, "w0", InFlight::prefill_tokens(6000))
        .await
        .unwrap();
    let o = s
        .route(M, &document, &params(tokens, 0.25, 5), &[], &[])
        .await
        .unwrap();
    assert_ne!(o.lookup.workers[o.chosen.unwrap()].info.worker_id, "w0");
    assert_eq!(o.prefill_tokens, tokens);
}
