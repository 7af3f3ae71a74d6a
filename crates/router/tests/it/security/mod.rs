//! Security and bad input over real HTTP, against real valkey-servers:
//! the bearer token on every internal route and method, the separate
//! internal listener, the body, depth and prompt limits, slow clients cut
//! off at the socket, JSON errors for malformed requests, and no secret in
//! the logs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use state::{StateTtls, WorkerHeartbeat};
use support::fake_worker::{FakeWorker, SSE_CHUNKS};
use support::router_process::RouterProcess;
use support::{M, Router, TOKEN, Valkey, args, http, raw_state, store, tokenizer_dir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod limits;
mod secrets;
mod slow_clients;
mod token;

const QWEN: &str = "qwen3";

/// Asserts `body` is the API's JSON error shape for `status`.
fn assert_json_error(status: u16, body: &[u8], what: &str) -> Value {
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "{what}: {status} body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(body)
        )
    });
    let err = &v["error"];
    assert!(
        err["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: no message in {v}"
    );
    assert!(err["type"].as_str().is_some(), "{what}: no type in {v}");
    assert_eq!(err["code"], status, "{what}: code in {v}");
    v
}

/// Sends `method path` with an optional token and body; (status, body).
async fn send(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, bytes::Bytes) {
    let mut req = http().request(method.parse::<Method>().unwrap(), url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.body(b.to_owned());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap())
}

/// A Valkey and a router with the real tokenizer for [`QWEN`], `n` fake
/// workers registered with long leases, and `tweak` applied to the flags.
async fn fleet(
    n: usize,
    tweak: impl FnOnce(&mut prefix_router::ServeArgs),
) -> (Valkey, Router, Vec<FakeWorker>) {
    let v = Valkey::start();
    let mut a = args();
    a.model = Some(QWEN.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    tweak(&mut a);
    let r = Router::start(&v.url(), a).await;
    // Serving only once the tokenizer is loaded: until then connections
    // wait in the backlog, where no deadline runs.
    wait_healthy(&r).await;
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let s = store(&v, "pr", "test-probe", ttls);
    let mut workers = Vec::new();
    for i in 0..n {
        let w = FakeWorker::start(&format!("w{i}")).await;
        let hb = WorkerHeartbeat {
            worker_id: w.name().into(),
            url: w.url(),
            load: None,
        };
        s.heartbeat(QWEN, &hb).await.unwrap();
        workers.push(w);
    }
    (v, r, workers)
}

async fn wait_healthy(r: &Router) {
    for _ in 0..600 {
        if let Ok(resp) = http().get(r.url("/health")).send().await
            && resp.status().is_success()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("router did not come up");
}
