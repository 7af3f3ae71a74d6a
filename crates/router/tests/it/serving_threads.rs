//! Thread per core with a real process: `prefix-router serve
//! --async-threads 2` accepts on both serving threads (each its own
//! runtime, with its own Valkey connections), serves requests that reach
//! Valkey from both, and at SIGTERM drains them all, exits cleanly and
//! ends its lease once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::json;
use state::StateTtls;
use support::router_process::RouterProcess;
use support::{TOKEN, Valkey, store};

const M: &str = "m";

/// `prefix_router_accepted_connections_total` per serving thread.
fn accepted_by_thread(metrics: &str) -> BTreeMap<String, u64> {
    let prefix = "prefix_router_accepted_connections_total{thread=\"";
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|rest| {
            let (thread, value) = rest.split_once("\"}")?;
            Some((thread.to_owned(), value.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// Heartbeats of worker `w`, each on a connection of its own, all at once.
async fn heartbeats_on_new_connections(base: &str, n: usize) {
    let sends = (0..n).map(|_| async {
        // No pooling: every request dials, and one of the threads accepts.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        client
            .post(format!("{base}/internal/heartbeat"))
            .bearer_auth(TOKEN)
            .json(&json!({"worker_id": "w", "url": "http://127.0.0.1:9", "model": M}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    for status in join_all(sends).await {
        assert_eq!(status, 200, "a heartbeat was refused");
    }
}

#[tokio::test]
async fn a_router_on_two_threads_accepts_on_both_and_ends_its_lease_at_sigterm() {
    let v = Valkey::start();
    let mut r = RouterProcess::start(&v.url(), &["--async-threads", "2"]).await;
    heartbeats_on_new_connections(&r.base, 1).await;
    // Another router's view of the fleet: its own lease plus the process's,
    // once the process's duties (on thread 0) have renewed it.
    let observer = store(&v, "pr", "observer", StateTtls::default());
    let lease = Duration::from_secs(60);
    let deadline = Instant::now() + Duration::from_secs(10);
    while observer.router_lease(M, lease).await.unwrap() < 2 {
        assert!(Instant::now() < deadline, "the router never leased {M}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // New connections wake both threads; the first free one takes each.
    // Both have taken some within a few rounds, unless one never accepts.
    let mut accepted = BTreeMap::new();
    for _ in 0..25 {
        heartbeats_on_new_connections(&r.base, 8).await;
        accepted = accepted_by_thread(&r.get("/metrics").await);
        if accepted.len() == 2 && accepted.values().all(|&n| n > 0) {
            break;
        }
    }
    assert_eq!(
        accepted.keys().map(String::as_str).collect::<Vec<_>>(),
        ["0", "1"],
        "connections accepted per thread: {accepted:?}"
    );
    assert!(
        accepted.values().all(|&n| n > 0),
        "a thread accepted nothing: {accepted:?}"
    );
    let status = r.terminate().expect("the router did not exit at SIGTERM");
    assert!(status.success(), "exit at SIGTERM: {status}");
    // Its lease ended with it, after both threads had drained.
    assert_eq!(observer.router_lease(M, lease).await.unwrap(), 1);
}
