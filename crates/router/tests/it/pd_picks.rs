//! The picks of disaggregated serving (issue 14) through a real router on a
//! real valkey-server, with fake prefill and decode workers over loopback
//! HTTP: the decode worker left alone counts its prefill until its first
//! byte; the decode pick matches a decode worker's prefix with the gap
//! probes the routing call makes; `--pd-prefill-policy least_loaded`
//! ignores locality.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use axum::http::StatusCode;
use futures_util::StreamExt;
use serde_json::json;
use support::counts::wait_counts;
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, http, metrics_text, post, store, tokenizer_dir};

async fn router(valkey: &Valkey, tune: impl Fn(&mut prefix_router::ServeArgs)) -> Router {
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(120));
    tune(&mut a);
    Router::start(&valkey.url(), a).await
}

async fn join(r: &Router, w: &FakeWorker, role: &str) {
    let hb = json!({"worker_id": w.name(), "url": w.url(), "model": M, "role": role});
    let (st, v) = post(r, "/internal/heartbeat", &hb).await;
    assert_eq!(st, 200, "{v}");
}

/// A fake prefill worker answering with the hand-off's params.
async fn prefill_worker(name: &str) -> FakeWorker {
    let w = FakeWorker::start(name).await;
    *w.shared.kv_transfer_params.lock().unwrap() = Some(json!({
        "do_remote_prefill": true, "do_remote_decode": false,
        "remote_block_ids": [[1, 2]], "remote_engine_id": name,
        "remote_host": "127.0.0.1", "remote_port": 5600,
    }));
    w
}

/// POSTs a completion through the router.
async fn complete(r: &Router, body: &serde_json::Value) -> reqwest::Response {
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(body)
        .send()
        .await;
    resp.unwrap()
}

/// `blocks` blocks of token ids (16 each), the same for the same `seed`.
fn tokens(seed: u32, blocks: usize) -> Vec<u32> {
    (0..blocks as u32 * 16)
        .map(|i| 1000 + (seed * 7919 + i * 31) % 50_000)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decode_worker_left_alone_counts_its_prefill_until_its_first_byte() {
    let valkey = Valkey::start();
    let r = router(&valkey, |_| {}).await;
    let p = prefill_worker("p0").await;
    let d = FakeWorker::start("d0").await;
    join(&r, &p, "prefill").await;
    join(&r, &d, "decode").await;
    // The prefill worker fails: the decode worker computes the prompt.
    *p.shared.status.lock().unwrap() = Some(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"model": M, "prompt": tokens(1, 20), "max_tokens": 4, "stream": true});
    let resp = complete(&r, &body).await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()
            .get("x-prefix-router-prefill-worker")
            .is_none()
    );
    assert_eq!(p.hits(), 1, "the prefill worker was tried");
    wait_counts(
        &r,
        M,
        "d0",
        |c| c == (1, 320),
        "the decode worker prefilling",
    )
    .await;
    wait_counts(&r, M, "p0", |c| c == (0, 0), "the failed prefill worker").await;
    d.release.send(()).unwrap();
    let mut stream = resp.bytes_stream();
    assert!(!stream.next().await.unwrap().unwrap().is_empty());
    wait_counts(&r, M, "d0", |c| c == (1, 0), "after the first byte").await;
    d.release.send(()).unwrap();
    d.release.send(()).unwrap();
    while stream.next().await.is_some() {}
    wait_counts(&r, M, "d0", |c| c == (0, 0), "after the end").await;
    let text = metrics_text(&r).await;
    assert!(
        text.contains("prefix_router_pd_requests_total{path=\"decode_only\"} 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_decode_pick_finds_a_tip_between_indexed_blocks() {
    let valkey = Valkey::start();
    // 40 of 50 blocks held is 80%: over this share, not over 0.8's.
    let r = router(&valkey, |a| a.pd_skip_prefill_share = Some(0.75)).await;
    let p = prefill_worker("p0").await;
    let d = FakeWorker::start("d0").await;
    join(&r, &p, "prefill").await;
    join(&r, &d, "decode").await;

    // A first turn of 40 blocks: the decode worker is claimed its indexed
    // blocks, 0, 1, 3, 7, 15, 31 and the tip, 39.
    let first = json!({"model": M, "prompt": tokens(2, 40), "max_tokens": 4});
    let resp = complete(&r, &first).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(p.hits(), 1);

    // The next turn resends it and adds 10 blocks: indexed 0, 1, …, 31,
    // 47, 49. The decode worker holds 40 blocks, but its last held indexed
    // block is 31: 32 blocks (64%) at indexed depth. The prefill worker is
    // made to hold 48 (through 47): the deepest worker short of the tip is
    // a prefill worker, whose gap is not the decode worker's.
    let next = json!({"model": M, "prompt": tokens(2, 50), "max_tokens": 4});
    let (st, e) = post(&r, "/admin/explain", &next).await;
    assert_eq!(st, 200, "{e}");
    let hashes: Vec<protocol::BlockHash> = e["block_hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(hashes.len(), 50);
    let s = store(&valkey, "pr", "test-claims", state::StateTtls::default());
    s.claim_prefix(M, "p0", &hashes[..48], 0).await.unwrap();

    let (_, e) = post(&r, "/admin/explain", &next).await;
    let pd = &e["disaggregation"];
    assert_eq!(pd["decode"]["matched_tokens"], 640, "{e}");
    assert_eq!(pd["skip_prefill"], true, "{e}");
    let resp = complete(&r, &next).await;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()
            .get("x-prefix-router-prefill-worker")
            .is_none()
    );
    assert_eq!(p.hits(), 1, "the prefill was skipped");
    assert_eq!(
        d.shared.bodies.lock().unwrap().last().unwrap()["prompt"],
        next["prompt"]
    );
}

/// The prefill workers that served `n` repeats of one prompt.
async fn prefill_workers_of_repeats(policy: Option<&str>, n: usize) -> BTreeSet<String> {
    let valkey = Valkey::start();
    let r = router(&valkey, |a| {
        // Never skip: every repeat is prefilled.
        a.pd_skip_prefill_share = Some(1.0);
        a.pd_prefill_policy = policy.map(String::from);
    })
    .await;
    let p0 = prefill_worker("p0").await;
    let p1 = prefill_worker("p1").await;
    let d = FakeWorker::start("d0").await;
    join(&r, &p0, "prefill").await;
    join(&r, &p1, "prefill").await;
    join(&r, &d, "decode").await;
    let body = json!({"model": M, "prompt": tokens(3, 30), "max_tokens": 2});
    let mut served = BTreeSet::new();
    for _ in 0..n {
        let resp = complete(&r, &body).await;
        assert_eq!(resp.status(), 200);
        let prefill = resp.headers()["x-prefix-router-prefill-worker"]
            .to_str()
            .unwrap()
            .to_owned();
        served.insert(prefill);
    }
    let (_, e) = post(&r, "/admin/explain", &body).await;
    let want = policy.unwrap_or("cache_aware");
    assert_eq!(e["disaggregation"]["prefill"]["policy"], want, "{e}");
    served
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_only_prefill_picks_ignore_the_prefix_held() {
    // Cache-aware: every repeat goes to the prefill worker holding it.
    assert_eq!(prefill_workers_of_repeats(None, 12).await.len(), 1);
    // Load only: idle workers tie, and ties go either way (the same one
    // 16 times in a row: 2 in 65,536).
    let served = prefill_workers_of_repeats(Some("least_loaded"), 16).await;
    assert_eq!(served.len(), 2, "{served:?}");
}
