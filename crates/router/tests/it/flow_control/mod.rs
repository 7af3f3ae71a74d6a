//! Flow control end to end: a router over real Valkey and a worker over
//! real HTTP that holds each request, `--max-in-flight-per-worker 1`: a
//! request waits while the worker is busy and is routed when it frees; a
//! wait past `--queue-timeout` is a 503 `queue_timeout` with `Retry-After`;
//! a client that goes away while waiting is never sent to the worker.

use crate::support;

use std::time::Duration;

use prefix_router::{AdmissionArgs, FlowArgs, ServeArgs};
use serde_json::{Value, json};
use state::{BatchLimits, SaturationThresholds, StateTtls};
use support::fake_worker::FakeWorker;
use support::{Router, Valkey, http};

mod lost_replies;
mod order;
mod waiting;

const MODEL: &str = "m";

async fn fleet(timeout: Duration) -> (Valkey, Router, FakeWorker) {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let router = Router::start(&valkey.url(), args(timeout, 1024)).await;
    warm(&valkey, &[&router], &w, 700).await;
    (valkey, router, w)
}

/// Sends each router one request and waits until each holds its lease on
/// the model (a router's in-flight counts weigh only under its lease,
/// which a new router takes at its first request), then makes the worker
/// hold each request `delay_ms`; the warm-up requests are forgotten.
async fn warm(valkey: &Valkey, routers: &[&Router], w: &FakeWorker, delay_ms: u64) {
    for r in routers {
        let resp = http()
            .post(r.url("/v1/completions"))
            .json(&body("warm"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let mut c = valkey.conn();
    for _ in 0..100 {
        let n: usize = redis::cmd("ZCARD")
            .arg("pr:{m}:routers")
            .query(&mut c)
            .unwrap();
        if n >= routers.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w.shared.bodies.lock().unwrap().clear();
    *w.shared.answer_delay.lock().unwrap() = Some(Duration::from_millis(delay_ms));
}

/// A worker, registered.
async fn worker(valkey: &Valkey) -> FakeWorker {
    let w = FakeWorker::start("w0").await;
    w.register_in(valkey, MODEL).await;
    w
}

/// One request in flight per worker; objective `high` is priority 10,
/// `batch` -1 (sheddable); no header: 0.
fn args(timeout: Duration, max_queued: usize) -> ServeArgs {
    let mut a = ServeArgs {
        flow: Box::new(FlowArgs {
            max_in_flight_per_worker: Some(1),
            queue_timeout: Some(timeout),
            max_queued: Some(max_queued),
            ..FlowArgs::default()
        }),
        admission: Box::new(AdmissionArgs {
            objectives: vec!["high=10".into(), "batch=-1".into()],
            ..AdmissionArgs::default()
        }),
        ..ServeArgs::default()
    };
    // The fake worker streams chunk by chunk on command: non-streamed
    // requests stay non-streamed to it.
    a.migration.migrate_unstreamed = Some(false);
    a
}

/// Sends `prompt` with `objective` (none: priority 0) to `router`; returns
/// the status and the error type of a refusal.
fn send(
    router: &Router,
    prompt: &str,
    objective: Option<&str>,
) -> tokio::task::JoinHandle<(u16, String)> {
    let mut request = http()
        .post(router.url("/v1/completions"))
        .json(&body(prompt));
    if let Some(o) = objective {
        request = request.header("x-gateway-inference-objective", o);
    }
    tokio::spawn(async move {
        let resp = request.send().await.unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        (status, v["error"]["type"].as_str().unwrap_or("").to_owned())
    })
}

/// The prompts the worker received, in order.
fn received(w: &FakeWorker) -> Vec<String> {
    w.shared
        .bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| b["prompt"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn body(prompt: &str) -> Value {
    json!({ "model": MODEL, "prompt": prompt, "max_tokens": 1 })
}

/// Sends the request that holds the worker ("one"); its status when done.
fn occupy(url: &str) -> tokio::task::JoinHandle<reqwest::StatusCode> {
    let request = http().post(url).json(&body("one"));
    tokio::spawn(async move { request.send().await.unwrap().status() })
}
