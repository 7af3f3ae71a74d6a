//! In-flight counts converge to the truth after Valkey stalls. While Valkey
//! is blocked, route calls pass their deadline and the router routes by its
//! fallback; Valkey runs the queued calls afterwards and counts requests
//! nobody will release. Before, those counts stayed for good (+239 after a
//! 10 s stall) and weighed on routing; now every router lease renewal
//! reconciles this router's gauges with its own ledger, so within one lease
//! period every count is back to the real number (0 once idle).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, get, http, metrics_text, post, tokenizer_dir};

/// The in-flight counts `/admin/workers` shows, per worker.
async fn in_flight(r: &Router) -> Vec<u64> {
    let (_, v) = get(r, &format!("/admin/workers?model={M}")).await;
    v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["in_flight"].as_u64().unwrap())
        .collect()
}

async fn fallbacks(r: &Router) -> f64 {
    let text = metrics_text(r).await;
    text.lines()
        .filter(|l| l.starts_with("prefix_router_decisions_total") && l.contains("fallback"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_converge_after_valkey_stalls_under_load() {
    let valkey = Valkey::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "yes",
    ]);
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.router_lease = Some(Duration::from_secs(6));
    // Long enough not to fall back on a busy 2-core machine, far shorter
    // than the stalls.
    a.valkey_timeout = Some(Duration::from_millis(150));
    let r = Arc::new(Router::start(&valkey.url(), a).await);
    let mut workers = Vec::new();
    for i in 0..3 {
        let w = FakeWorker::start(&format!("w{i}")).await;
        *w.shared.answer_delay.lock().unwrap() = Some(Duration::from_millis(50));
        let hb = json!({"worker_id": w.name(), "url": w.url(), "model": M});
        assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);
        workers.push(w);
    }

    // Steady load from 12 clients; Valkey blocks twice in the middle.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..12 {
        let (r, stop) = (r.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let prompt = format!("client {c} request {i} {}", "x ".repeat(40));
                let resp = http()
                    .post(r.url("/v1/completions"))
                    .json(&json!({"model": M, "prompt": prompt}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status().as_u16(), 200);
                i += 1;
            }
        }));
    }
    let url = valkey.url();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.8")
                .query(&mut conn)
                .unwrap();
        })
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    assert!(
        fallbacks(&r).await > 0.0,
        "the stalls caused no fallback: the test did not exercise the defect"
    );

    // Idle now: within one lease period every count is 0 again.
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let counts = in_flight(&r).await;
        if counts.iter().all(|n| *n == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "in-flight counts still {counts:?} a lease period after the load ended"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A router started before any worker registered (as every restarted router
/// and every reporter-registered vLLM start) counts requests in flight from
/// its first one: issue 13's "in-flight goes uncounted" defect.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_router_counts_in_flight_from_the_first_request() {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    let r = Arc::new(Router::start(&valkey.url(), a).await);
    let mut workers = Vec::new();
    for i in 0..2 {
        let w = FakeWorker::start(&format!("w{i}")).await;
        *w.shared.answer_delay.lock().unwrap() = Some(Duration::from_secs(4));
        let hb = json!({"worker_id": w.name(), "url": w.url(), "model": M});
        assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);
        workers.push(w);
    }
    let mut held = Vec::new();
    for i in 0..3 {
        let r = r.clone();
        held.push(tokio::spawn(async move {
            http()
                .post(r.url("/v1/completions"))
                .json(&json!({"model": M, "prompt": format!("held open {i}"), "max_tokens": 1}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let arrived = Instant::now() + Duration::from_secs(2);
    while workers
        .iter()
        .map(|w| w.shared.hits.load(Ordering::SeqCst))
        .sum::<usize>()
        < 3
    {
        assert!(
            Instant::now() < arrived,
            "the requests did not reach the workers"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        in_flight(&r).await.iter().sum::<u64>(),
        3,
        "three requests in flight, counted from the start"
    );
    for h in held {
        assert_eq!(h.await.unwrap(), 200);
    }
}
