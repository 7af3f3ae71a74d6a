//! Tenants' fleet-wide limits end to end (issue 28): real routers sharing a
//! real valkey-server, a fake OpenAI worker over HTTP. Requests, tokens
//! (reserved, corrected by the answer's usage) and requests in flight
//! (released at the answer's end and when the client leaves); refusals as
//! OpenAI's 429; exactness across four routers over a short window; the
//! degraded per-router share while Valkey is away.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use prefix_router::{AdmissionArgs, ServeArgs};
use serde_json::{Value, json};
use support::fake_worker::FakeWorker;
use support::{Router, Valkey, args, http};

mod accounting;
mod fleet_wide;
mod refusals;

const MODEL: &str = "m";

/// `serve` flags with admission set by `tune`.
fn limited(tune: impl FnOnce(&mut AdmissionArgs)) -> ServeArgs {
    let mut a = args();
    let mut adm = AdmissionArgs::default();
    tune(&mut adm);
    a.admission = Box::new(adm);
    a
}

/// One router limited by `tune` in front of one fake worker.
async fn one_router(tune: impl FnOnce(&mut AdmissionArgs)) -> (Valkey, FakeWorker, Router) {
    let valkey = Valkey::start();
    let worker = FakeWorker::start("w0").await;
    worker.register_in(&valkey, MODEL).await;
    let r = Router::start(&valkey.url(), limited(tune)).await;
    (valkey, worker, r)
}

/// A completion of `max_tokens` (streamed when `stream`) as `key`'s tenant.
async fn send(r: &Router, key: &str, max_tokens: u64, stream: bool) -> reqwest::Response {
    http()
        .post(r.url("/v1/completions"))
        .bearer_auth(key)
        .json(&json!({"model": MODEL, "prompt": "hi", "max_tokens": max_tokens, "stream": stream}))
        .send()
        .await
        .unwrap()
}

fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

/// Asserts `resp` is OpenAI's 429 for `reason`, with every header.
async fn assert_limited(resp: reqwest::Response, reason: &str, kinds: &[&str]) {
    assert_eq!(resp.status().as_u16(), 429);
    let retry: u64 = header(&resp, "retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1, "Retry-After {retry}");
    assert_eq!(header(&resp, "x-ratelimit-reason").as_deref(), Some(reason));
    for kind in kinds {
        for h in ["limit", "remaining", "reset"] {
            assert!(
                header(&resp, &format!("x-ratelimit-{h}-{kind}")).is_some(),
                "x-ratelimit-{h}-{kind} missing"
            );
        }
    }
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_exceeded");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant")
    );
}
