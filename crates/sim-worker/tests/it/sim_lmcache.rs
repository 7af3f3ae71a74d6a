//! A sim with LMCache beside it (`--lmcache-controller`) against the real
//! LMCache controller (lmcache 0.5.6 from the venv of
//! `scripts/lmcache-test.sh`; without it the test prints `SKIPPED` and
//! passes): the chunks the sim reports over the controller's ZeroMQ
//! protocol, in keys computed in Rust, are the ones the controller's own
//! `lookup` computes from the prompt's tokens; and the CPU tier they
//! stand for is not reported through the sim's KV events.

use std::time::{Duration, Instant};

use fleet::LmcacheController;
use fleet::lmcache::lmcache_venv;
use protocol::WorkerRole;
use protocol::kv_events::KvEvent;
use serde_json::{Value, json};
use sim_worker::server::LmcacheSettings;

use crate::common::{Sim, config};

async fn lookup(controller: &str, tokens: &[u32]) -> Value {
    reqwest::Client::new()
        .post(format!("{controller}/lookup"))
        .json(&json!({ "tokens": tokens }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The controller's lookup of `tokens` until `done` holds of its layout.
async fn until(controller: &str, tokens: &[u32], done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let layout = lookup(controller, tokens).await["layout_info"].clone();
        if done(&layout) {
            return layout;
        }
        assert!(
            Instant::now() < deadline,
            "controller never showed it: {layout}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_controllers_lookup_finds_the_chunks_the_sim_reports() {
    let Some(venv) = lmcache_venv(None) else {
        eprintln!("SKIPPED sim_lmcache: no LMCache venv; run scripts/lmcache-test.sh");
        return;
    };
    let logs = tempfile::tempdir().unwrap();
    let controller = LmcacheController::start(&venv, logs.path().join("controller.log"))
        .await
        .unwrap();
    let mut c = config("sim-lm", WorkerRole::Both);
    // 48 GPU blocks (768 tokens) and a CPU tier of 64.
    c.engine.num_blocks = 48;
    c.tiers.cpu_blocks = 64;
    c.lmcache = Some(LmcacheSettings::parse(&controller.sim_flag(), "vllm-7").unwrap());
    let mut sim = Sim::start(c).await;
    sim.warm_up().await;

    // A 600-token prompt: two full chunks (512 tokens) are reported.
    let a: Vec<u32> = (0..600u32)
        .map(|i| 1000 + (i * 7919 + 13) % 50_000)
        .collect();
    let body = json!({"model": "qwen3", "prompt": a, "max_tokens": 1});
    assert_eq!(sim.complete(&body).await.status(), 200);
    let layout = until(&controller.url, &a, |l| l["vllm-7"][1] == 512).await;
    assert_eq!(layout["vllm-7"][0], "LocalCPUBackend", "{layout}");

    // Another 600-token prompt evicts a's blocks from the GPU pool to the
    // CPU tier: the controller still finds a whole, and the sim's KV
    // events show no CPU-tier event.
    let b: Vec<u32> = (0..600u32)
        .map(|i| 2000 + (i * 104_729 + 7) % 50_000)
        .collect();
    let body = json!({"model": "qwen3", "prompt": b, "max_tokens": 1});
    assert_eq!(sim.complete(&body).await.status(), 200);
    until(&controller.url, &b, |l| l["vllm-7"][1] == 512).await;
    let state = sim.state().await;
    assert!(
        state["cpu_tier"]["cached_blocks"].as_u64().unwrap() > 0,
        "{state}"
    );
    let layout = until(&controller.url, &a, |l| l["vllm-7"][1] == 512).await;
    assert_eq!(layout["vllm-7"][0], "LocalCPUBackend");
    let events = sim
        .events_until(|e| e.iter().any(|e| matches!(e, KvEvent::BlockRemoved(_))))
        .await;
    let cpu = |m: &Option<String>| m.as_deref() == Some("CPU");
    assert!(
        !events.iter().any(|e| match e {
            KvEvent::BlockStored(s) => cpu(&s.medium),
            KvEvent::BlockRemoved(r) => cpu(&r.medium),
            _ => false,
        }),
        "a CPU-tier event was published: {events:?}"
    );
}
