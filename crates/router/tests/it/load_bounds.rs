//! One worker's load report cannot break another request: absurd queue
//! lengths (up to 2^64 − 1, by heartbeat or by the ORCA response header)
//! are bounded to `MAX_REPORTED_REQUESTS` where they are stored, and a
//! value already in Valkey past the bound is bounded where it is read.
//! Before, such a report made `/v1/models`, `/admin/workers` and explain
//! answer 500 until the worker's lease lapsed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use protocol::MAX_REPORTED_REQUESTS;
use serde_json::{Value, json};
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, get, http, post};

/// `/v1/models`, `/admin/workers` and explain all answer 200; returns the
/// listed worker `id`.
async fn public_and_admin_routes_answer(r: &Router, id: &str) -> Value {
    let (st, models) = get(r, "/v1/models").await;
    assert_eq!(st, 200, "{models}");
    assert_eq!(models["data"][0]["id"], M);
    let (st, explain) = post(r, "/admin/explain", &json!({"model": M, "prompt": "hi"})).await;
    assert_eq!(st, 200, "{explain}");
    let (st, workers) = get(r, &format!("/admin/workers?model={M}")).await;
    assert_eq!(st, 200, "{workers}");
    let list = workers["workers"].as_array().unwrap();
    list.iter().find(|w| w["worker_id"] == id).unwrap().clone()
}

#[tokio::test]
async fn absurd_heartbeat_loads_are_bounded() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    for (waiting, running) in [(u64::MAX, i64::MAX as u64), (i64::MAX as u64, u64::MAX)] {
        let body = json!({"worker_id": "w0", "url": "http://127.0.0.1:9", "model": M,
            "load": {"num_requests_waiting": waiting, "num_requests_running": running}});
        let (st, answer) = post(&r, "/internal/heartbeat", &body).await;
        assert_eq!(st, 200, "{answer}");
        let w = public_and_admin_routes_answer(&r, "w0").await;
        assert_eq!(
            w["load"]["num_requests_waiting"], MAX_REPORTED_REQUESTS,
            "{w}"
        );
        assert_eq!(
            w["load"]["num_requests_running"], MAX_REPORTED_REQUESTS,
            "{w}"
        );
    }

    // A value stored before the bound existed (or by anything else) is
    // bounded where it is read.
    let mut conn = valkey.conn();
    let key = format!("pr:{{{M}}}:w:1");
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("waiting")
        .arg("1e19")
        .query(&mut conn)
        .unwrap();
    let w = public_and_admin_routes_answer(&r, "w0").await;
    assert_eq!(
        w["load"]["num_requests_waiting"], MAX_REPORTED_REQUESTS,
        "{w}"
    );
}

#[tokio::test]
async fn an_absurd_orca_report_is_bounded() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    let worker = FakeWorker::start("w0").await;
    let body = json!({"worker_id": "w0", "url": worker.url(), "model": M});
    assert_eq!(post(&r, "/internal/heartbeat", &body).await.0, 200);
    worker
        .shared
        .orca_waiting
        .store(usize::MAX, Ordering::SeqCst);
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&json!({"model": M, "prompt": "hello", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // The ORCA report is recorded in the background.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let w = public_and_admin_routes_answer(&r, "w0").await;
        if w["load"]["num_requests_waiting"] == MAX_REPORTED_REQUESTS {
            break;
        }
        assert!(Instant::now() < deadline, "ORCA load never recorded: {w}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
