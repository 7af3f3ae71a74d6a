//! The workers side end to end, with real processes: a real router on a
//! real valkey-server, two `sim-worker`s reporting by push and two
//! vLLM-like engines (sims that only publish vLLM KV events over ZeroMQ)
//! reported by `prefix-router reporter` processes. After traffic, and after
//! each fault (30% of eviction reports dropped, ZeroMQ sequence gaps, a
//! reporter restart, the engine clearing its cache, an engine restart, seen
//! before any new event by its metrics), the
//! shared state of every worker equals that worker's real cache, block by
//! block, within a sync period.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use crate::harness;

use std::collections::BTreeSet;
use std::time::Duration;

use harness::{MODEL, Sim, completion, prompt, tokenizer_dir};
use serde_json::json;
use support::reporter_process::Reporter;
use support::{Router, TOKEN, Valkey, args, free_port, http};

/// How long a convergence may take on 2 busy cores running debug builds
/// (a deadline for polling, not a latency bound).
const PATIENCE: Duration = Duration::from_secs(30);

/// A reporter beside engine `sim` (its KV-event and replay ports: the first
/// two of `ports`).
fn reporter(worker: &str, sim: &Sim, router: &Router, ports: (u16, u16, u16)) -> Reporter {
    Reporter::start(worker, MODEL, &sim.base, router, (ports.0, ports.1))
}

/// Small caches, so that traffic evicts; fast time.
const SIM_FLAGS: [&str; 4] = ["--num-blocks", "24", "--time-scale", "0.02"];

/// A vLLM-like engine: serves HTTP and publishes KV events on fixed ports
/// (a restarted one is found at the same addresses), pushes nothing.
async fn engine(worker: &str, ports: (u16, u16, u16)) -> Sim {
    engine_with(worker, ports, &[]).await
}

/// [`engine`] with `extra` flags.
async fn engine_with(worker: &str, ports: (u16, u16, u16), extra: &[&str]) -> Sim {
    let http_port = ports.2.to_string();
    let mut flags = vec!["--port", &http_port];
    flags.extend(SIM_FLAGS);
    flags.extend(extra);
    Sim::engine(worker, (ports.0, ports.1), &flags).await
}

/// A router of [`MODEL`] on `valkey`.
async fn router_of(valkey: &Valkey) -> Router {
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    Router::start(&valkey.url(), a).await
}

/// An engine's KV-event, replay and HTTP ports.
fn three_ports() -> (u16, u16, u16) {
    (
        free_port().unwrap(),
        free_port().unwrap(),
        free_port().unwrap(),
    )
}

/// A sim that pushes to the fleet itself, with a 2 s sync period.
async fn pushing(worker: &str, router: &Router) -> Sim {
    let mut flags = SIM_FLAGS.to_vec();
    flags.extend(["--sync-interval", "2s"]);
    Sim::pushing(worker, &router.url(""), TOKEN, &flags).await
}

/// The hashes the shared state holds for `worker`'s live incarnation.
fn fleet_blocks(valkey: &Valkey, worker: &str) -> BTreeSet<String> {
    support::worker_blocks(valkey, "pr", MODEL, worker)
}

async fn send(url: String, topic: &str) {
    let resp = http()
        .post(url)
        .json(&completion(&prompt(topic, 12), 2, false))
        .send()
        .await
        .expect("completion");
    assert_eq!(resp.status(), 200);
}

/// Prompts straight to one engine (the router is not involved).
async fn serve(sim: &Sim, topics: &[&str]) {
    for topic in topics {
        send(sim.url("/v1/completions"), topic).await;
    }
}

/// Waits until the shared state holds exactly what `sim` caches; on
/// timeout, says what differs.
async fn converged(valkey: &Valkey, worker: &str, sim: &Sim, what: &str) -> BTreeSet<String> {
    let started = std::time::Instant::now();
    let deadline = started + PATIENCE;
    loop {
        let cached = sim.indexed().await;
        let fleet = fleet_blocks(valkey, worker);
        if fleet == cached {
            eprintln!(
                "{worker}: {what}: converged in {:.2} s ({} blocks)",
                started.elapsed().as_secs_f64(),
                cached.len()
            );
            return cached;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "{worker}: {what}: the fleet never matched the cache: {} only in the fleet, {} only in the cache",
                fleet.difference(&cached).count(),
                cached.difference(&fleet).count()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn set_faults(sim: &Sim, body: serde_json::Value) {
    sim.faults(body).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleets_state_equals_every_workers_cache_through_faults() {
    let valkey = Valkey::start();
    let router = router_of(&valkey).await;
    let push = [
        pushing("push-a", &router).await,
        pushing("push-b", &router).await,
    ];
    let ports = [
        (
            free_port().unwrap(),
            free_port().unwrap(),
            free_port().unwrap(),
        ),
        (
            free_port().unwrap(),
            free_port().unwrap(),
            free_port().unwrap(),
        ),
    ];
    let zmq = [
        engine("zmq-a", ports[0]).await,
        engine("zmq-b", ports[1]).await,
    ];
    let _reporter_a = reporter("zmq-a", &zmq[0], &router, ports[0]);
    let reporter_b = reporter("zmq-b", &zmq[1], &router, ports[1]);
    let workers: Vec<(&str, &Sim)> = vec![
        ("push-a", &push[0]),
        ("push-b", &push[1]),
        ("zmq-a", &zmq[0]),
        ("zmq-b", &zmq[1]),
    ];

    // Traffic through the router, and to each engine: every worker caches,
    // and small caches evict.
    for t in 0..12 {
        send(router.url("/v1/completions"), &format!("routed-{}", t % 8)).await;
    }
    for (_, sim) in &workers {
        serve(sim, &["alpha", "beta", "gamma"]).await;
    }
    for (worker, sim) in &workers {
        let held = converged(&valkey, worker, sim, "after traffic").await;
        assert!(!held.is_empty());
    }

    // 30% of eviction reports lost by a pushing worker: the next sync heals.
    set_faults(&push[0], json!({"drop_evictions": 0.3})).await;
    serve(&push[0], &["delta", "epsilon", "zeta", "eta"]).await;
    converged(
        &valkey,
        "push-a",
        &push[0],
        "after dropped eviction reports",
    )
    .await;

    // ZeroMQ sequence gaps: the reporter fills them from the replay socket.
    set_faults(&zmq[0], json!({"lose_kv_batches": 0.3})).await;
    serve(&zmq[0], &["delta", "epsilon", "zeta", "eta", "theta"]).await;
    set_faults(&zmq[0], json!({"lose_kv_batches": 0.0})).await;
    converged(&valkey, "zmq-a", &zmq[0], "after sequence gaps").await;

    // The engine clears its cache (AllBlocksCleared), then works on.
    let resp = http()
        .post(zmq[0].url("/reset_prefix_cache"))
        .send()
        .await
        .expect("reset");
    assert!(resp.status().is_success());
    serve(&zmq[0], &["iota"]).await;
    converged(
        &valkey,
        "zmq-a",
        &zmq[0],
        "after the engine cleared its cache",
    )
    .await;

    // A reporter that was down while its engine kept working catches up
    // from the engine's replay buffer when it starts again.
    drop(reporter_b);
    serve(&zmq[1], &["kappa", "lambda"]).await;
    let _reporter_b = reporter("zmq-b", &zmq[1], &router, ports[1]);
    let before = converged(&valkey, "zmq-b", &zmq[1], "after a reporter restart").await;

    // A restarted engine (empty cache, numbering from 0) on the same
    // endpoints. Until the reporter's socket reconnects, the engine's
    // events go nowhere (ZeroMQ PUB drops them); it keeps working.
    let [zmq_a, zmq_b] = zmq;
    drop(zmq_b);
    let zmq_b = engine("zmq-b", ports[1]).await;
    // Before any request it publishes nothing, but its metrics show a new
    // process (its counters start again): the reporter drops the old cache.
    let cold = converged(
        &valkey,
        "zmq-b",
        &zmq_b,
        "a restarted engine, no request yet",
    )
    .await;
    assert!(cold.is_empty() && !before.is_empty());
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut round = 0;
    let now = 'outer: loop {
        round += 1;
        serve(&zmq_b, &[format!("mu-{}", round % 3).as_str()]).await;
        // Each prompt changes the cache; give the reports time to land
        // before the next one.
        let settle = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < settle {
            let cached = zmq_b.indexed().await;
            if fleet_blocks(&valkey, "zmq-b") == cached {
                break 'outer cached;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "zmq-b: the fleet never followed the restarted engine"
        );
    };
    assert!(now.is_disjoint(&before), "blocks of the old engine remain");
    // Everyone else is still exact.
    for (worker, sim) in [
        ("push-a", &push[0]),
        ("push-b", &push[1]),
        ("zmq-a", &zmq_a),
    ] {
        converged(&valkey, worker, sim, "at the end").await;
    }
}

/// An engine offloading to a CPU tier (vLLM's offloading connector): it
/// stores a copy on the CPU, without tokens, before the GPU evicts the
/// block. The reporter keeps the block held while any medium holds it, so
/// the fleet still routes to a prefix that lives only on the CPU tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_offloaded_to_the_cpu_tier_stay_in_the_index() {
    let valkey = Valkey::start();
    let router = router_of(&valkey).await;
    let ports = three_ports();
    let sim = engine_with("zmq-cpu", ports, &["--cpu-blocks", "64"]).await;
    let _reporter = reporter("zmq-cpu", &sim, &router, ports);
    serve(&sim, &["alpha", "beta", "gamma", "delta"]).await;
    let held = converged(&valkey, "zmq-cpu", &sim, "after offloading").await;
    let on_cpu = sim.cpu_cached().await;
    assert!(
        !on_cpu.is_empty(),
        "the GPU evicted nothing to the CPU tier"
    );
    let indexed_on_cpu: BTreeSet<&String> = on_cpu.intersection(&held).collect();
    assert!(
        !indexed_on_cpu.is_empty(),
        "no indexed block lives only on the CPU tier"
    );
}

/// The status `worker` is listed with (`live`, `draining`), if any live
/// or marked incarnation.
async fn status(router: &Router, worker: &str) -> Option<String> {
    let (_, v) = support::get(router, &format!("/admin/workers?model={MODEL}")).await;
    v["workers"]
        .as_array()?
        .iter()
        .find(|w| w["worker_id"] == worker && w["lease_left_ms"].as_i64().unwrap_or(-1) > 0)
        .and_then(|w| w["status"].as_str().map(str::to_owned))
}

/// Graceful drain from the reporter (issue 29): `GET /drain` on its
/// metrics listener, as a Kubernetes `preStop` hook calls it, marks the
/// worker draining in the fleet and answers once the engine runs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reporters_get_drain_marks_its_worker_draining_and_answers_when_idle() {
    let valkey = Valkey::start();
    let router = router_of(&valkey).await;
    let ports = three_ports();
    let sim = engine("zmq-drain", ports).await;
    let metrics_port = free_port().unwrap();
    let spec = Reporter::spec("zmq-drain", MODEL, &sim.base, &router, (ports.0, ports.1)).args([
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
        "--drain-deadline",
        "20s",
    ]);
    let _reporter = Reporter::from_spec(&spec);
    let deadline = std::time::Instant::now() + PATIENCE;
    while status(&router, "zmq-drain").await.as_deref() != Some("live") {
        assert!(
            std::time::Instant::now() < deadline,
            "the reporter never registered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let started = std::time::Instant::now();
    let resp = http()
        .get(format!("http://127.0.0.1:{metrics_port}/drain"))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "drained\n");
    // The engine ran nothing: answered well before the 20 s deadline.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        status(&router, "zmq-drain").await.as_deref(),
        Some("draining")
    );
    // Still registered and marked: undrained, it is live again.
    let resp = http()
        .delete(router.url("/admin/workers/zmq-drain/drain"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(status(&router, "zmq-drain").await.as_deref(), Some("live"));
}
