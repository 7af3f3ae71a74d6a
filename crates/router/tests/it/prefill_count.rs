//! A request's prefill counts on its worker until the response's first
//! byte (issue 13, "load cost ignores continuous batching"): the uncached
//! prompt tokens a router sent weigh on the worker while it prefills them,
//! and only then; the request itself counts until its end.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use support::counts::wait_counts;
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, http, post, tokenizer_dir};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_requests_prefill_counts_until_its_first_byte() {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    let r = Arc::new(Router::start(&valkey.url(), a).await);
    let w = FakeWorker::start("w0").await;
    let hb = json!({"worker_id": w.name(), "url": w.url(), "model": M});
    assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);

    let body = json!({
        "model": M,
        "prompt": "the quick brown fox jumps over the lazy dog ".repeat(40),
        "stream": true,
    });
    let (st, explain) = post(&r, "/admin/explain", &body).await;
    assert_eq!(st, 200, "{explain}");
    let prompt_tokens = explain["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt_tokens > 300 && prompt_tokens % 16 != 0,
        "{prompt_tokens}"
    );

    // The worker holds nothing: the whole prompt is its prefill.
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    wait_counts(&r, M, "w0", |c| c == (1, prompt_tokens), "while prefilling").await;
    let (_, explain) = post(&r, "/admin/explain", &body).await;
    let row: &Value = &explain["candidates"][0];
    assert_eq!(row["prefill_tokens"], prompt_tokens, "{explain}");

    // The first chunk: prefill over, the request still counts.
    w.release.send(()).unwrap();
    let mut stream = resp.bytes_stream();
    use futures_util::StreamExt;
    let first = stream.next().await.unwrap().unwrap();
    assert!(!first.is_empty());
    wait_counts(&r, M, "w0", |c| c == (1, 0), "after the first byte").await;

    // The rest: nothing counts.
    w.release.send(()).unwrap();
    w.release.send(()).unwrap();
    while stream.next().await.is_some() {}
    wait_counts(&r, M, "w0", |c| c == (0, 0), "after the end").await;

    // A second request of the same prompt, answered whole after a second:
    // the worker now holds its full blocks (claimed by the first), so only
    // the last partial block is counted as its prefill, until the answer.
    *w.shared.answer_delay.lock().unwrap() = Some(Duration::from_secs(1));
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let second = {
        let r = r.clone();
        tokio::spawn(async move {
            let resp = http().post(r.url("/v1/completions")).json(&whole).send();
            resp.await.unwrap().status().as_u16()
        })
    };
    wait_counts(
        &r,
        M,
        "w0",
        |c| c == (1, prompt_tokens % 16),
        "the second request",
    )
    .await;
    assert_eq!(second.await.unwrap(), 200);
    wait_counts(&r, M, "w0", |c| c == (0, 0), "after the second").await;
}
