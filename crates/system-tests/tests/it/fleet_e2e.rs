//! The fleet end to end with real processes: a valkey-server, two
//! `prefix-router serve` processes, three stub workers over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use state::{StateStore, StateTtls, WorkerHeartbeat};
use support::fake_worker::FakeWorker;
use support::router_process::RouterProcess;
use support::{Valkey, http, store};

const MODEL: &str = "qwen3";

fn router_flags(extra: &[&'static str]) -> Vec<&'static str> {
    let dir: &'static str = Box::leak(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/tokenizers/qwen3")
            .to_string_lossy()
            .into_owned()
            .into_boxed_str(),
    );
    let mut flags = vec![
        "--model",
        MODEL,
        "--tokenizer-dir",
        dir,
        "--valkey-timeout",
        "2s",
        // The fake workers stream chunk by chunk on command: non-streamed
        // requests stay non-streamed to them.
        "--migrate-unstreamed",
        "false",
    ];
    flags.extend_from_slice(extra);
    flags
}

async fn register(s: &StateStore, w: &FakeWorker) {
    let hb = WorkerHeartbeat {
        worker_id: w.name().into(),
        url: w.url(),
        load: None,
    };
    s.heartbeat(MODEL, &hb).await.unwrap();
}

/// Sends a completion through `router`; returns (status, serving worker).
async fn complete(router: &RouterProcess, prompt: &str) -> (u16, String) {
    let resp = http()
        .post(format!("{}/v1/completions", router.base))
        .json(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    let worker = resp
        .headers()
        .get("x-prefix-router-worker")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (resp.status().as_u16(), worker)
}

fn document(topic: &str) -> String {
    // About 3k tokens: a realistic shared prefix, worth more than a few
    // requests queued in front of its holder.
    format!(
        "Reference manual for {topic}.\n{}",
        "A line of the shared manual, section by section.\n".repeat(300)
    )
}

struct Fleet {
    valkey: Valkey,
    store: StateStore,
    workers: Vec<FakeWorker>,
}

async fn fleet() -> Fleet {
    let valkey = Valkey::start();
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(120),
        ..StateTtls::default()
    };
    let store = store(&valkey, "pr", "test-probe", ttls);
    let mut workers = Vec::new();
    for i in 0..3 {
        let w = FakeWorker::start(&format!("w{i}")).await;
        register(&store, &w).await;
        workers.push(w);
    }
    Fleet {
        valkey,
        store,
        workers,
    }
}

#[tokio::test]
async fn two_routers_share_one_view_and_survive_restarts() {
    let f = fleet().await;
    let a = RouterProcess::start(&f.valkey.url(), &router_flags(&[])).await;
    let b = RouterProcess::start(&f.valkey.url(), &router_flags(&[])).await;
    let doc = document("routers");
    let (st, owner) = complete(&a, &format!("{doc}Question 0")).await;
    assert_eq!(st, 200);
    // The same prefix through either router reaches the same worker.
    for i in 1..7 {
        let r = if i % 2 == 0 { &a } else { &b };
        let (st, w) = complete(r, &format!("{doc}Question {i}")).await;
        assert_eq!((st, w.as_str()), (200, owner.as_str()), "request {i}");
    }
    // Both routers killed and restarted: still warm, from Valkey. One of
    // them now runs on a single async thread.
    drop(a);
    drop(b);
    let a = RouterProcess::start(&f.valkey.url(), &router_flags(&[])).await;
    let one_thread = router_flags(&["--async-threads", "1"]);
    let b = RouterProcess::start(&f.valkey.url(), &one_thread).await;
    for (i, r) in [&a, &b].into_iter().enumerate() {
        let (st, w) = complete(r, &format!("{doc}After restart {i}")).await;
        assert_eq!(
            (st, w.as_str()),
            (200, owner.as_str()),
            "cold after restart"
        );
    }
    // The owner crashes: requests are retried elsewhere, no client error.
    let crashed = f.workers.iter().find(|w| w.name() == owner).unwrap();
    crashed.shared.crashed.store(true, Ordering::SeqCst);
    for i in 0..4 {
        let r = if i % 2 == 0 { &a } else { &b };
        let (st, w) = complete(r, &format!("{doc}During the crash {i}")).await;
        assert_eq!(st, 200, "client saw the crash");
        assert_ne!(w, owner);
    }
}

#[tokio::test]
async fn routers_agree_on_a_new_prefix_sent_concurrently() {
    let f = fleet().await;
    // Locality only (no queue cost, no load bound): this is about routers
    // agreeing, not about spreading load. One prompt of whole blocks (token
    // ids): a follower adds no prefill to the first request's, so the
    // holder costs what a cold worker does, and at equal cost it wins.
    let flags = router_flags(&[
        "--epsilon",
        "100",
        "--queue-cost-tokens",
        "0",
        "--batch-cost-tokens",
        "0",
    ]);
    let a = RouterProcess::start(&f.valkey.url(), &flags).await;
    let b = RouterProcess::start(
        &f.valkey.url(),
        &[&flags[..], &["--async-threads", "1"]].concat(),
    )
    .await;
    let ids: Vec<u32> = (0..320).map(|i| 1000 + i * 7).collect();
    let mut tasks = Vec::new();
    for i in 0..32 {
        let base = if i % 2 == 0 {
            a.base.clone()
        } else {
            b.base.clone()
        };
        let prompt = ids.clone();
        tasks.push(tokio::spawn(async move {
            let resp = http()
                .post(format!("{base}/v1/completions"))
                .json(&json!({"model": MODEL, "prompt": prompt}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 200);
            resp.headers()["x-prefix-router-worker"]
                .to_str()
                .unwrap()
                .to_owned()
        }));
    }
    let mut chosen = BTreeSet::new();
    for t in tasks {
        chosen.insert(t.await.unwrap());
    }
    assert_eq!(
        chosen.len(),
        1,
        "32 concurrent requests split over {chosen:?}"
    );
}

#[tokio::test]
async fn valkey_outage_is_served_by_fallback_and_shared_routing_resumes() {
    let mut f = fleet().await;
    let a = RouterProcess::start(&f.valkey.url(), &router_flags(&[])).await;
    let (st, _) = complete(&a, "warm the worker list").await;
    assert_eq!(st, 200);
    f.valkey.kill();
    for i in 0..6 {
        let (st, _) = complete(&a, &format!("during the outage {i}")).await;
        assert_eq!(st, 200, "a request failed because Valkey is down");
    }
    // Valkey returns empty; workers re-register with their next heartbeat.
    f.valkey.restart();
    for w in &f.workers {
        register(&f.store, w).await;
    }
    let doc = document("resumption");
    let mut owner = String::new();
    let mut resumed = false;
    for i in 0..50 {
        let (st, w) = complete(&a, &format!("{doc}Question {i}")).await;
        assert_eq!(st, 200);
        // Each serving thread of the router reconnects on its own first
        // call: a request may still be routed by fallback, to any worker;
        // locality is two requests in a row on one worker.
        if w != owner {
            owner = w;
        } else {
            // Prefix locality again: the shared state is in use.
            let metrics: Value = json!(
                http()
                    .get(format!("{}/metrics", a.base))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap()
            );
            resumed = metrics.as_str().unwrap().contains("outcome=\"hit\"");
            if resumed {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        resumed,
        "shared routing did not resume after Valkey came back"
    );
}
