//! Prefill/decode disaggregation (issue 14) through a real router on a real
//! valkey-server, with fake workers over loopback HTTP as the prefill
//! worker (answering with `kv_transfer_params`) and the decode worker: the
//! exact bodies of vLLM's disaggregated proxy flow, in-flight counts and
//! claims on both workers, prefill failures (another prefill worker, else
//! the decode worker alone, never half an answer), explain's two picks and
//! skip decision, and a model of colocated workers routed as before.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::fake_worker::{FakeWorker, SSE_CHUNKS};
use support::{M, Router, Valkey, args, free_port, get, http, post, tokenizer_dir, worker_blocks};

mod handoff;
mod roles;

/// A router for model [`M`], hashing as the Qwen3 tokenizer does, with
/// leases that outlast a slow test.
async fn router(valkey: &Valkey) -> Router {
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(120));
    Router::start(&valkey.url(), a).await
}

/// Registers a worker through the router's push API, with `role` if given.
async fn join(r: &Router, id: &str, url: &str, role: Option<&str>) {
    let mut hb = json!({"worker_id": id, "url": url, "model": M});
    if let Some(role) = role {
        hb["role"] = role.into();
    }
    let (st, v) = post(r, "/internal/heartbeat", &hb).await;
    assert_eq!(st, 200, "{v}");
}

/// A prompt of about `lines` × 12 tokens, distinct per `topic`.
fn text(topic: &str, lines: usize) -> String {
    (0..lines)
        .map(|i| format!("Line {i} of the {topic} document, repeated for length.\n"))
        .collect()
}

/// A client's answer: status, the worker headers and the body.
struct Answer {
    status: u16,
    worker: Option<String>,
    prefill: Option<String>,
    text: String,
}

async fn complete(r: &Router, path: &str, body: &Value) -> Answer {
    let resp = http().post(r.url(path)).json(body).send().await.unwrap();
    let header = |n: &str| {
        resp.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (worker, prefill) = (
        header("x-prefix-router-worker"),
        header("x-prefix-router-prefill-worker"),
    );
    Answer {
        status: resp.status().as_u16(),
        worker,
        prefill,
        text: resp.text().await.unwrap(),
    }
}
