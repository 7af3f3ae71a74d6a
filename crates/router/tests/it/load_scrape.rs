//! Scraping the workers' `/metrics`: a real router with
//! `--scrape-metrics-interval`, a real valkey-server, fake vLLM workers over
//! HTTP exposing vLLM's gauges, the real Qwen3 tokenizer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use prefix_router::WORKER_HEADER;
use protocol::vllm_metrics::parse_sample;
use serde_json::{Value, json};
use state::{StateStore, StateTtls, WorkerHeartbeat};
use support::fake_worker::FakeWorker;
use support::{Router, TOKEN, Valkey, args, http, store, tokenizer_dir};

const MODEL: &str = "qwen3";
const INTERVAL: Duration = Duration::from_millis(100);

/// A vLLM-shaped `/metrics` page: one (waiting, running, kv) per engine.
fn vllm_metrics(engines: &[(u32, u32, f64)]) -> String {
    let mut out = String::from(
        "# HELP python_gc_objects_collected_total Objects collected during gc\n\
         # TYPE python_gc_objects_collected_total counter\n\
         python_gc_objects_collected_total{generation=\"0\"} 1252.0\n",
    );
    let gauges = [
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
    ];
    for (g, name) in gauges.into_iter().enumerate() {
        out.push_str(&format!(
            "# HELP {name} A vLLM gauge.\n# TYPE {name} gauge\n"
        ));
        for (i, &(waiting, running, kv)) in engines.iter().enumerate() {
            let value = match g {
                0 => format!("{waiting}.0"),
                1 => format!("{running}.0"),
                _ => kv.to_string(),
            };
            out.push_str(&format!(
                "{name}{{engine=\"{i}\",model_name=\"{MODEL}\"}} {value}\n"
            ));
        }
    }
    out.push_str(&format!(
        "vllm:prompt_tokens_total{{engine=\"0\",model_name=\"{MODEL}\"}} 1.2e6\n"
    ));
    out
}

async fn register(store: &StateStore, w: &FakeWorker) {
    let hb = WorkerHeartbeat {
        worker_id: w.name().into(),
        url: w.url(),
        load: None,
    };
    store.heartbeat(MODEL, &hb).await.unwrap();
}

async fn scraping_router(valkey: &Valkey) -> Router {
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.scrape_metrics_interval = Some(INTERVAL);
    Router::start(&valkey.url(), a).await
}

/// `GET /admin/workers?model=…`: worker id → its listing.
async fn workers(r: &Router) -> Vec<Value> {
    let resp = http()
        .get(r.url(&format!("/admin/workers?model={MODEL}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    body["workers"].as_array().cloned().unwrap_or_default()
}

/// Polls `/admin/workers` until `want(worker's listing)` holds for `id`.
async fn wait_for(r: &Router, id: &str, want: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..100 {
        if let Some(w) = workers(r).await.into_iter().find(|w| w["worker_id"] == id) {
            if want(&w) {
                return w;
            }
            last = w;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("worker {id} never reached the expected state; last: {last}");
}

fn has_load(waiting: u64, running: u64, kv: f64) -> impl Fn(&Value) -> bool {
    move |w| {
        w["load"]["num_requests_waiting"] == waiting
            && w["load"]["num_requests_running"] == running
            && w["load"]["kv_cache_usage_perc"].as_f64() == Some(kv)
            && w["load_age"].as_u64().is_some_and(|age| age < 5_000)
    }
}

/// Sends a prompt no worker has seen; returns (status, serving worker).
async fn cold(r: &Router, i: usize) -> (u16, String) {
    let prompt = format!(
        "Cold prompt number {i}: {}",
        "never seen before. ".repeat(i + 3)
    );
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    let worker = resp
        .headers()
        .get(WORKER_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (resp.status().as_u16(), worker)
}

async fn wait_no_in_flight(store: &StateStore) {
    for _ in 0..50 {
        let l = store.probe(MODEL, &[]).await.unwrap();
        if l.workers.iter().all(|w| w.info.in_flight == 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("requests still counted in flight");
}

#[tokio::test]
async fn scraped_gauges_reach_the_shared_state_and_steer_cold_prompts() {
    let valkey = Valkey::start();
    let probe = store(&valkey, "pr", "test-probe", StateTtls::default());
    let busy = FakeWorker::start("busy").await;
    let idle = FakeWorker::start("idle").await;
    // Two data-parallel engines: queues add up, KV usage is the fullest.
    busy.set_metrics(StatusCode::OK, vllm_metrics(&[(3, 8, 0.5), (4, 8, 0.8)]));
    idle.set_metrics(StatusCode::OK, vllm_metrics(&[(0, 1, 0.1)]));
    register(&probe, &busy).await;
    register(&probe, &idle).await;
    let router = scraping_router(&valkey).await;

    wait_for(&router, "busy", has_load(7, 16, 0.8)).await;
    wait_for(&router, "idle", has_load(0, 1, 0.1)).await;
    for i in 0..8 {
        let (st, w) = cold(&router, i).await;
        assert_eq!((st, w.as_str()), (200, "idle"), "cold prompt {i}");
        wait_no_in_flight(&probe).await;
    }

    // The loads turn around; so does routing, after a few intervals.
    busy.set_metrics(StatusCode::OK, vllm_metrics(&[(0, 0, 0.05)]));
    idle.set_metrics(StatusCode::OK, vllm_metrics(&[(6, 8, 0.7), (5, 8, 0.95)]));
    wait_for(&router, "busy", has_load(0, 0, 0.05)).await;
    wait_for(&router, "idle", has_load(11, 16, 0.95)).await;
    for i in 8..14 {
        let (st, w) = cold(&router, i).await;
        assert_eq!((st, w.as_str()), (200, "busy"), "cold prompt {i}");
        wait_no_in_flight(&probe).await;
    }

    // Scraping records load only: a drained worker stays out of routing.
    let resp = http()
        .delete(router.url(&format!("/internal/workers/busy?model={MODEL}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let scrapes = busy.shared.metrics_hits.load(Ordering::SeqCst);
    tokio::time::sleep(INTERVAL * 5).await;
    let listed = workers(&router).await;
    let w = listed.iter().find(|w| w["worker_id"] == "busy");
    assert!(
        w.is_none_or(|w| w["status"] == "draining"),
        "a scrape revived a drained worker: {w:?}"
    );
    assert!(
        busy.shared.metrics_hits.load(Ordering::SeqCst) <= scrapes + 1,
        "a drained worker is no longer scraped"
    );
    router.stop().await;
}

/// Waits until the router has counted more than `above` scrape failures
/// for `reason`; fails the test after 10 s.
async fn wait_failures(r: &Router, reason: &str, above: f64) {
    let mut last = 0.0;
    for _ in 0..200 {
        last = failures(r, reason).await;
        if last > above {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut all = Vec::new();
    for other in [
        "timeout",
        "http",
        "status",
        "too_large",
        "no_gauges",
        "state",
    ] {
        all.push((other, failures(r, other).await));
    }
    panic!("no {reason} scrape failure counted (still {last}, before {above}); all: {all:?}");
}

/// The router's own counter `prefix_router_scrape_failures_total{reason}`.
async fn failures(r: &Router, reason: &str) -> f64 {
    let text = http()
        .get(r.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter_map(parse_sample)
        .filter(|s| s.name == "prefix_router_scrape_failures_total")
        .filter(|s| s.label("reason") == Some(reason))
        .map(|s| s.value)
        .sum()
}

#[tokio::test]
async fn workers_with_broken_metrics_are_skipped_without_disturbing_routing() {
    let valkey = Valkey::start();
    let probe = store(&valkey, "pr", "test-probe", StateTtls::default());
    let busy = FakeWorker::start("busy").await;
    let good = FakeWorker::start("good").await;
    busy.set_metrics(StatusCode::OK, vllm_metrics(&[(9, 9, 0.9)]));
    good.set_metrics(StatusCode::OK, vllm_metrics(&[(0, 0, 0.2)]));
    let erroring = FakeWorker::start("erroring").await;
    erroring.set_metrics(StatusCode::INTERNAL_SERVER_ERROR, "oops");
    let html = FakeWorker::start("html").await;
    html.set_metrics(
        StatusCode::OK,
        "<html><body>vllm:num_requests_waiting</body></html>",
    );
    let hung = FakeWorker::start("hung").await;
    hung.set_metrics(StatusCode::OK, vllm_metrics(&[(0, 0, 0.0)]));
    *hung.shared.metrics_delay.lock().unwrap() = Some(Duration::from_secs(30));
    let huge = FakeWorker::start("huge").await;
    huge.set_metrics(StatusCode::OK, "# padding\n".repeat(500_000));
    let all = [&busy, &good, &erroring, &html, &hung, &huge];
    for w in all {
        register(&probe, w).await;
    }
    let before = [
        failures_now("status").await,
        failures_now("no_gauges").await,
    ];
    let router = scraping_router(&valkey).await;

    // A stalled worker costs a round one timeout, not its 30 s.
    wait_for(&router, "busy", has_load(9, 9, 0.9)).await;
    wait_for(&router, "good", has_load(0, 0, 0.2)).await;
    good.set_metrics(StatusCode::OK, vllm_metrics(&[(2, 1, 0.3)]));
    wait_for(&router, "good", has_load(2, 1, 0.3)).await;
    for broken in ["erroring", "html", "hung", "huge"] {
        let w = wait_for(&router, broken, |w| w["status"] == "live").await;
        assert!(w["load_age"].is_null(), "{broken} got a load: {w}");
    }
    // Each broken worker is counted once its scrape has failed (a round
    // may still be running when the workers are listed).
    for (reason, above) in [
        ("status", before[0]),
        ("no_gauges", before[1]),
        ("timeout", 0.0),
        ("too_large", 0.0),
    ] {
        wait_failures(&router, reason, above).await;
    }

    // Requests are still answered, and never by the loaded worker.
    for i in 0..10 {
        let (st, w) = cold(&router, i).await;
        assert_eq!(st, 200, "cold prompt {i}");
        assert_ne!(w, "busy", "cold prompt {i} went to the loaded worker");
        wait_no_in_flight(&probe).await;
    }
    router.stop().await;
}

/// The failure counters before this test's router started (the recorder
/// is shared by every router in this process).
async fn failures_now(reason: &str) -> f64 {
    let handle = prefix_router::metrics_handle().unwrap();
    handle
        .render()
        .lines()
        .filter_map(parse_sample)
        .filter(|s| s.name == "prefix_router_scrape_failures_total")
        .filter(|s| s.label("reason") == Some(reason))
        .map(|s| s.value)
        .sum()
}
