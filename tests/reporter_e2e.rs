//! `prefix-router reporter` as a real process between a vLLM-like engine
//! (a `sim-worker` that only publishes vLLM KV events over ZeroMQ, and does
//! not push) and a real router on a real valkey-server: the shared state
//! follows the engine's cache, a restarted reporter resynchronises from the
//! engine's replay buffer, and a restarted engine resets the worker.

mod support;

#[path = "sim_worker/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};

use harness::{MODEL, Sim, completion, eventually, prompt, tokenizer_dir};
use support::{Router, TOKEN, Valkey, args, free_port, http};

const WORKER: &str = "engine-a";

/// A reporter process; SIGKILLed on drop.
struct Reporter(Child);

impl Reporter {
    fn start(sim: &Sim, router: &Router, kv_port: u16, replay_port: u16) -> Reporter {
        let child = Command::new(env!("CARGO_BIN_EXE_prefix-router"))
            .arg("reporter")
            // vLLM binds "tcp://*:PORT"; the reporter connects to it.
            .args(["--kv-events", &format!("tcp://*:{kv_port}")])
            .args(["--replay", &format!("tcp://127.0.0.1:{replay_port}")])
            .args(["--engine-url", &sim.base])
            .args(["--fleet-url", &router.url("")])
            .args(["--internal-token", TOKEN])
            .args(["--worker-id", WORKER, "--model", MODEL])
            .env("PREFIX_ROUTER_LOG", "warn")
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn reporter");
        Reporter(child)
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An engine publishing KV events on fixed ports (so a restarted one is
/// found at the same endpoints), with a small cache that must evict.
fn engine(kv_port: u16, replay_port: u16) -> Sim {
    Sim::start(&[
        "--worker-id",
        WORKER,
        "--num-blocks",
        "24",
        "--time-scale",
        "0.02",
        "--kv-events-endpoint",
        &format!("tcp://127.0.0.1:{kv_port}"),
        "--kv-events-replay-endpoint",
        &format!("tcp://127.0.0.1:{replay_port}"),
    ])
}

/// The hashes the shared state holds for the worker's live incarnation.
fn fleet_blocks(valkey: &Valkey) -> BTreeSet<String> {
    let mut conn = valkey.conn();
    let base = format!("pr:{{{MODEL}}}");
    let idx: Option<String> = redis::cmd("HGET")
        .arg(format!("{base}:ids"))
        .arg(WORKER)
        .query(&mut conn)
        .expect("HGET ids");
    let Some(idx) = idx else {
        return BTreeSet::new();
    };
    redis::cmd("SMEMBERS")
        .arg(format!("{base}:r:{idx}"))
        .query(&mut conn)
        .expect("SMEMBERS")
}

/// Sends prompts straight to the engine (the router is not involved).
async fn serve(sim: &Sim, topics: &[&str]) {
    for topic in topics {
        let resp = http()
            .post(sim.url("/v1/completions"))
            .json(&completion(&prompt(topic, 12), 2, false))
            .send()
            .await
            .expect("completion");
        assert_eq!(resp.status(), 200);
    }
}

async fn converged(valkey: &Valkey, sim: &Sim, what: &str) -> BTreeSet<String> {
    eventually(what, || async {
        let cached = sim.cached().await;
        (!cached.is_empty() && fleet_blocks(valkey) == cached).then_some(cached)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_follows_a_stock_engine_through_its_kv_events() {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    let router = Router::start(&valkey.url(), a).await;
    let (kv_port, replay_port) = (free_port(), free_port());
    let sim = engine(kv_port, replay_port);
    let reporter = Reporter::start(&sim, &router, kv_port, replay_port);

    // Stores, then evictions (24 blocks hold about two of these prompts).
    serve(&sim, &["alpha"]).await;
    let first = converged(&valkey, &sim, "stored blocks reach the fleet").await;
    serve(&sim, &["beta", "gamma", "delta"]).await;
    let later = converged(&valkey, &sim, "evictions reach the fleet").await;
    assert!(
        !first.is_subset(&later),
        "the small cache should have evicted some of the first prompt's blocks"
    );
    // The router routes on what the reporter told it: a repeated prompt
    // goes to the engine, which serves it from its cache.
    let resp = http()
        .post(router.url("/v1/completions"))
        .json(&completion(&prompt("delta", 12), 2, false))
        .send()
        .await
        .expect("routed");
    assert_eq!(resp.status(), 200);
    let cached: u64 = resp.headers()["x-sim-cached-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(cached > 0, "a prefix the fleet knows about was a miss");

    // A reporter that was down while the engine kept working catches up
    // from the engine's replay buffer when it starts again.
    drop(reporter);
    serve(&sim, &["epsilon", "zeta"]).await;
    let _reporter = Reporter::start(&sim, &router, kv_port, replay_port);
    converged(&valkey, &sim, "a restarted reporter resynchronises").await;

    // A restarted engine (empty cache, sequence back to 0) on the same
    // endpoints: the worker's old blocks leave the fleet.
    drop(sim);
    let sim = engine(kv_port, replay_port);
    // Until the reporter's socket has reconnected, the engine's events go
    // nowhere (ZeroMQ PUB drops them); the engine keeps working meanwhile.
    let mut round = 0;
    let now = eventually("the fleet follows the restarted engine", || {
        round += 1;
        let topic = format!("eta-{}", round % 3);
        let (sim, valkey) = (&sim, &valkey);
        async move {
            serve(sim, &[topic.as_str()]).await;
            let cached = sim.cached().await;
            (fleet_blocks(valkey) == cached).then_some(cached)
        }
    })
    .await;
    assert!(now.is_disjoint(&later), "blocks of the old engine remain");
}
