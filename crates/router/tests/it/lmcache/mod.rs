//! LMCache as a state source (issue 31), through the router's HTTP API:
//! a controller that never answers or cannot be reached costs no request
//! (default suite); and, against the real LMCache controller from PyPI
//! driven over its own ZMQ protocol by simulated LMCache workers
//! (`scripts/lmcache/sim_lmcache_worker.py`), a prompt only one
//! instance's LMCache holds goes to that instance's worker and explain
//! shows the tier's tokens. The real-controller test needs the venv that
//! `scripts/lmcache-test.sh` builds (`LMCACHE_VENV`); without it, it says
//! so and returns.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fleet::LmcacheController;
use prefix_router::{LmCacheArgs, ServeArgs};
use serde_json::{Value, json};
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, free_port, http, metrics_text, post, tokenizer_dir};

mod controller_down;
mod real_lmcache;

/// A prompt of `n` token ids, distinct for each `seed`.
fn prompt(seed: u32, n: u32) -> Vec<u32> {
    (0..n).map(|i| 1000 + seed * 7919 + i).collect()
}

fn lm_args(controller: &str, map: &[&str]) -> ServeArgs {
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.lmcache = Box::new(LmCacheArgs {
        lmcache_controller: Some(controller.to_owned()),
        lmcache_instance_map: map.iter().map(|s| (*s).to_owned()).collect(),
        lmcache_deadline: Some(Duration::from_millis(50)),
        lmcache_poll_interval: Some(Duration::from_millis(200)),
        ..LmCacheArgs::default()
    });
    a
}

/// Fake workers `w0` and `w1` registered for [`M`].
async fn two_workers(r: &Router) -> Vec<FakeWorker> {
    let mut workers = Vec::new();
    for id in ["w0", "w1"] {
        let w = FakeWorker::start(id).await;
        let body = json!({"worker_id": id, "url": w.url(), "model": M});
        let (st, answer) = post(r, "/internal/heartbeat", &body).await;
        assert_eq!(st, 200, "{answer}");
        workers.push(w);
    }
    workers
}

/// A completion of `tokens` through the router, within `limit`.
async fn complete(r: &Router, tokens: &[u32], limit: Duration) -> u16 {
    http()
        .post(r.url("/v1/completions"))
        .timeout(limit)
        .json(&json!({"model": M, "prompt": tokens, "max_tokens": 1}))
        .send()
        .await
        .expect("the request ends within its limit")
        .status()
        .as_u16()
}

/// The value of the counter line starting with `prefix` (0 when absent).
fn counter(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}
