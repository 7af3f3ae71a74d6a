//! The CPU tier and transfer timing: the engine's schedule exactly (pure,
//! no clock), then a sim over loopback HTTP with its KV events over real
//! ZeroMQ: GPU evictions move to the CPU tier with vLLM's medium labels,
//! a CPU hit is a load, not a prefill, and every tier's events replay to
//! the worker's cached set.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Sim, completion, config, hex_set, prompt, sample};
use protocol::WorkerRole;
use protocol::hashing::BlockHash;
use protocol::kv_events::KvEvent;
use serde_json::Value;
use sim_worker::{
    Engine, EngineConfig, KvSource, KvTransferModel, Medium, RequestId, SimRequest, Ticket, Tiers,
    TimeModel,
};

fn engine(cpu_blocks: usize) -> Engine {
    let mut e = Engine::new(EngineConfig {
        time: TimeModel {
            prefill_per_token: Duration::from_micros(100),
            prefill_per_cached_token: Duration::from_micros(2),
            request_overhead: Duration::from_millis(5),
            decode_per_token: Duration::from_millis(20),
            time_scale: 1.0,
        },
        num_blocks: 8,
        block_size: 16,
        ..EngineConfig::default()
    })
    .unwrap()
    .with_audit();
    e.set_tiers(Tiers {
        cpu_blocks,
        // 1,000 bytes a token at 1 GB/s: 1 µs a token, 16 µs a block.
        transfer: KvTransferModel {
            kv_bytes_per_token: 1000,
            remote_gbps: 8.0,
            cpu_gbps: 8.0,
        },
    })
    .unwrap();
    e
}

fn req(id: u64, first: u64, blocks: u64) -> SimRequest {
    SimRequest {
        id: RequestId(id),
        block_hashes: (first..first + blocks).map(BlockHash).collect(),
        prompt_tokens: blocks as usize * 16 + 1,
        output_tokens: 1,
    }
}

fn admitted(t: Ticket) -> sim_worker::Admission {
    match t {
        Ticket::Admitted(a) => a,
        Ticket::Queued { .. } => panic!("queued"),
    }
}

#[test]
fn a_remote_prefill_costs_its_transfer_and_the_last_token_only() {
    let mut e = engine(0);
    let a = admitted(
        e.submit_from(req(1, 100, 4), KvSource::RemotePrefill, Duration::ZERO)
            .unwrap(),
    );
    // 65 tokens: 5 blocks pulled (the partial one too), 80 µs; then the
    // overhead, 1 token computed and 64 over cached KV.
    let want =
        Duration::from_micros(80) + Duration::from_millis(5) + Duration::from_micros(100 + 64 * 2);
    assert_eq!(a.first_token_at, want);
    assert_eq!((a.cached_tokens, a.cpu_tokens, a.remote_tokens), (0, 0, 64));
    assert_eq!(a.reported_cached_tokens(), 64);
    e.advance(a.done_at);
    assert_eq!(
        e.cache().lookup(&req(1, 100, 4).block_hashes),
        4,
        "received blocks are cached"
    );
    assert_eq!(e.counters().remote_tokens, 64);
    e.check_invariants().unwrap();
}

#[test]
fn an_evicted_block_moves_to_the_cpu_tier_and_a_hit_on_it_is_a_load() {
    let mut e = engine(4);
    let a = admitted(e.submit(req(1, 100, 4), Duration::ZERO).unwrap());
    e.advance(a.done_at);
    e.drain_tier_events();
    // 8 GPU blocks: 8 new ones evict the 4 of request 1.
    let b = admitted(e.submit(req(2, 200, 7), a.done_at).unwrap());
    let moved: Vec<_> = e.drain_tier_events();
    // The copy is stored on the CPU before the block leaves the GPU, as
    // vLLM reports an offload.
    let [cpu_stored, gpu_removed] = moved.as_slice() else {
        panic!("{moved:?}");
    };
    assert_eq!(gpu_removed.medium, Medium::Gpu);
    assert_eq!(cpu_stored.medium, Medium::Cpu);
    let sim_worker::CacheEvent::Stored { hashes, parent, .. } = &cpu_stored.event else {
        panic!("{cpu_stored:?}");
    };
    assert_eq!((hashes.len(), *parent), (4, None));
    e.advance(b.done_at);
    e.check_invariants().unwrap();
    e.drain_tier_events();
    // Request 1's prompt again: its 4 blocks are loaded from the CPU tier.
    let c = admitted(e.submit(req(3, 100, 4), b.done_at).unwrap());
    assert_eq!((c.cached_tokens, c.cpu_tokens), (0, 64));
    let load = Duration::from_micros(4 * 16);
    let compute = Duration::from_millis(5) + Duration::from_micros(100 + 64 * 2);
    assert_eq!(c.first_token_at - c.admitted_at, load + compute);
    let events = e.drain_tier_events();
    assert_eq!(
        events[0].medium,
        Medium::Cpu,
        "taken off the CPU tier first: {events:?}"
    );
    e.advance(c.done_at);
    assert_eq!(
        e.cache().lookup(&req(3, 100, 4).block_hashes),
        4,
        "back on the GPU"
    );
    assert!(e.cache().cpu_hashes().iter().all(|h| h.0 >= 200));
    assert_eq!(e.counters().cpu_hit_tokens, 64);
    e.check_invariants().unwrap();
}

fn events_of(events: &[KvEvent], tag: &str, medium: &str) -> BTreeSet<String> {
    events
        .iter()
        .filter(|e| e.tag() == tag)
        .filter_map(|e| match e {
            KvEvent::BlockStored(s) if s.medium.as_deref() == Some(medium) => Some(&s.block_hashes),
            KvEvent::BlockRemoved(r) if r.medium.as_deref() == Some(medium) => {
                Some(&r.block_hashes)
            }
            _ => None,
        })
        .flatten()
        .map(|h| h.to_block_hash().to_hex())
        .collect()
}

/// Applies events to the set of cached (medium, hash) pairs strictly (a
/// stored pair is new, a removed one present), over both tiers.
fn replay(set: &mut BTreeSet<(String, String)>, events: &[KvEvent]) {
    let pair = |m: &Option<String>, h: &protocol::kv_events::EngineHash| {
        (m.clone().unwrap_or_default(), h.to_block_hash().to_hex())
    };
    for e in events {
        match e {
            KvEvent::BlockStored(s) => s
                .block_hashes
                .iter()
                .for_each(|h| assert!(set.insert(pair(&s.medium, h)), "stored twice: {e:?}")),
            KvEvent::BlockRemoved(r) => r.block_hashes.iter().for_each(|h| {
                assert!(
                    set.remove(&pair(&r.medium, h)),
                    "removed while absent: {e:?}"
                )
            }),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The hashes of a replayed set, whatever their medium.
fn hashes_of(set: &BTreeSet<(String, String)>) -> BTreeSet<String> {
    set.iter().map(|(_, h)| h.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_tier_evictions_and_hits_over_http_with_medium_labels() {
    let mut c = config("t-0", WorkerRole::Both);
    c.engine.num_blocks = 40;
    c.engine.time.time_scale = 0.05;
    c.tiers.cpu_blocks = 64;
    let mut sim = Sim::start(c).await;
    sim.warm_up().await;
    // What the sim holds before the events below, all on its GPU.
    let mut cached: BTreeSet<(String, String)> = hex_set(&sim.state().await["cached_hashes"])
        .into_iter()
        .map(|h| ("GPU".to_owned(), h))
        .collect();
    let north = prompt("north", 20);
    let first = sim.complete(&completion(&north, 4)).await;
    assert_eq!(first.headers()["x-sim-cached-tokens"], "0");
    let first: Value = first.json().await.unwrap();
    let prompt_tokens = first["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    let north_hashes = hex_set(&sim.state().await["cached_hashes"])
        .difference(&hashes_of(&cached))
        .cloned()
        .collect::<BTreeSet<_>>();
    assert!(north_hashes.len() >= 10, "{north_hashes:?}");
    // Four more prompts of the same size evict north from the 40 GPU blocks.
    for topic in ["south", "east", "west", "up"] {
        assert_eq!(
            sim.complete(&completion(&prompt(topic, 20), 4))
                .await
                .status(),
            200
        );
    }
    let state = sim.state().await;
    assert!(
        hex_set(&state["cpu_hashes"]).is_superset(&north_hashes),
        "{state}"
    );
    let events = sim
        .events_until(|ev| events_of(ev, "BlockStored", "CPU").is_superset(&north_hashes))
        .await;
    assert!(events_of(&events, "BlockRemoved", "GPU").is_superset(&north_hashes));
    for e in &events {
        if let KvEvent::BlockStored(s) = e
            && s.medium.as_deref() == Some("CPU")
        {
            // As vLLM's offloading connector sends them.
            assert!(
                s.token_ids.is_empty() && s.parent_block_hash.is_none() && s.lora_name.is_none()
            );
        }
    }
    let mut all = events.clone();

    // North again: a CPU hit, loaded back to the GPU.
    let again = sim.complete(&completion(&north, 4)).await;
    let served: usize = again.headers()["x-sim-cached-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        served,
        16 * north_hashes.len().min((prompt_tokens - 1) / 16)
    );
    let answer: Value = again.json().await.unwrap();
    assert_eq!(
        answer["usage"]["prompt_tokens_details"]["cached_tokens"],
        served
    );
    let events = sim
        .events_until(|ev| events_of(ev, "BlockStored", "GPU").is_superset(&north_hashes))
        .await;
    assert!(events_of(&events, "BlockRemoved", "CPU").is_superset(&north_hashes));
    all.extend(events);
    let metrics = sim.metrics().await;
    assert_eq!(
        sample(&metrics, "sim:cpu_hit_tokens_total"),
        Some(served as f64)
    );
    assert!(sample(&metrics, "sim:offloaded_blocks_total").unwrap() >= north_hashes.len() as f64);
    assert!(sample(&metrics, "sim:cpu_cached_blocks").is_some());

    // Every tier's events replay to exactly the worker's cached set.
    let state = sim.state().await;
    replay(&mut cached, &all);
    assert_eq!(hashes_of(&cached), hex_set(&state["cached_hashes"]));
    let on_cpu: BTreeSet<String> = cached
        .iter()
        .filter(|(m, _)| m == "CPU")
        .map(|(_, h)| h.clone())
        .collect();
    assert_eq!(on_cpu, hex_set(&state["cpu_hashes"]));
    assert!(hex_set(&state["cpu_hashes"]).is_disjoint(&north_hashes));
}
