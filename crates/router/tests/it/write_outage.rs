//! A Valkey write outage longer than the worker lease (issue 30, defect 4),
//! on a real valkey-server made to refuse writes with `maxmemory` and
//! `noeviction`: requests keep being routed during it, the first ones after
//! writes come back find the worker (whose heartbeats were refused) live
//! instead of a 404 `model_not_found`, and a worker that really stopped is
//! still removed afterwards.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use support::fake_worker::FakeWorker;
use support::{M, Router, TOKEN, Valkey, args, get, http};

/// The worker lease: the outage below lasts more than twice as long.
const LEASE: Duration = Duration::from_secs(2);

async fn complete(r: &Router) -> u16 {
    let body = json!({"model": M, "prompt": "hello there", "max_tokens": 2});
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    resp.bytes().await.unwrap();
    status
}

/// Heartbeats `w` through `r` every 300 ms while `beating` (refusals
/// ignored, as a reporter retries).
fn heartbeats(r: &Router, w: &FakeWorker, beating: Arc<AtomicBool>) {
    let (url, body) = (
        r.url("/internal/heartbeat"),
        json!({"worker_id": w.name(), "url": w.url(), "model": M}),
    );
    tokio::spawn(async move {
        loop {
            if beating.load(Ordering::SeqCst) {
                let _ = http()
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .json(&body)
                    .send()
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
}

fn set_maxmemory(v: &Valkey, bytes: &str) {
    let mut c = v.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query(&mut c)
        .unwrap();
}

/// Whether `/admin/workers` lists `id` as live.
async fn listed_live(r: &Router, id: &str) -> bool {
    let (st, v) = get(r, &format!("/admin/workers?model={M}")).await;
    assert_eq!(st, 200, "{v}");
    v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["worker_id"] == id && w["status"] == "live")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_outage_past_the_lease_does_not_lose_live_workers() {
    let valkey = Valkey::start();
    let mut a = args();
    a.worker_lease = Some(LEASE);
    let r = Router::start(&valkey.url(), a).await;
    let w = FakeWorker::start("w0").await;
    let beating = Arc::new(AtomicBool::new(true));
    heartbeats(&r, &w, beating.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while complete(&r).await != 200 {
        assert!(Instant::now() < deadline, "the worker never registered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Writes refused for 2.5 leases: heartbeats are refused (the worker
    // stops sending them until after the first requests below, so that
    // none can land before them), routing goes on over the workers seen.
    set_maxmemory(&valkey, "1");
    beating.store(false, Ordering::SeqCst);
    let outage = Instant::now();
    let mut during = Vec::new();
    while outage.elapsed() < LEASE * 5 / 2 {
        during.push(complete(&r).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(during.iter().all(|s| *s == 200), "during: {during:?}");

    // Writes back: the requests right after find the worker live.
    set_maxmemory(&valkey, "0");
    let mut after = Vec::new();
    for _ in 0..10 {
        after.push(complete(&r).await);
    }
    assert!(after.iter().all(|s| *s == 200), "after: {after:?}");
    assert!(listed_live(&r, "w0").await);
    let hits = w.hits();
    assert!(hits >= 10, "{hits}");

    // A worker that really stopped is still removed: without heartbeats,
    // its lease lapses (what it had left at the outage, at most a lease).
    let stopped = Instant::now();
    while listed_live(&r, "w0").await {
        assert!(
            stopped.elapsed() < LEASE * 4,
            "a worker without heartbeats stayed live"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    r.stop().await;
}
