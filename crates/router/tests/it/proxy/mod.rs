//! The routing path end to end: real routers, a real valkey-server, fake
//! OpenAI workers over HTTP, the real Qwen3 tokenizer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use prefix_router::WORKER_HEADER;
use protocol::hashing::{HashSeed, LoraKey};
use serde_json::{Value, json};
use state::{StateStore, StateTtls, WorkerHeartbeat};
use support::fake_worker::{FakeWorker, SSE_CHUNKS};
use support::{Router, Valkey, args, http, store, tokenizer_dir};
use tokenize::ModelPipeline;

mod chat;
mod pass_through;
mod routing;
mod valkey_down;

const MODEL: &str = "qwen3";

struct Fleet {
    valkey: Valkey,
    router: Router,
    store: StateStore,
    workers: Vec<FakeWorker>,
}

async fn fleet(n: usize) -> Fleet {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.loras = vec!["sql-lora=/adapters/sql-lora".into()];
    let router = Router::start(&valkey.url(), a).await;
    // Workers are registered once: a lease that outlives the slowest test
    // on 2 shared cores.
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let store = store(&valkey, "pr", "test-probe", ttls);
    let mut workers = Vec::new();
    for i in 0..n {
        let w = FakeWorker::start(&format!("w{i}")).await;
        register(&store, w.name(), &w.url()).await;
        workers.push(w);
    }
    Fleet {
        valkey,
        router,
        store,
        workers,
    }
}

async fn register(store: &StateStore, id: &str, url: &str) {
    let hb = WorkerHeartbeat {
        worker_id: id.into(),
        url: url.into(),
        load: None,
    };
    store.heartbeat(MODEL, &hb).await.unwrap();
}

async fn complete(f: &Fleet, body: Value) -> (u16, String, Value) {
    send(f, "/v1/completions", &body).await
}

/// POSTs `body`; returns the status, the serving worker, and the JSON answer.
async fn send(f: &Fleet, path: &str, body: &Value) -> (u16, String, Value) {
    let resp = http()
        .post(f.router.url(path))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let worker = resp
        .headers()
        .get(WORKER_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, worker, resp.json().await.unwrap_or(Value::Null))
}

/// Polls until no request is counted in flight (decrements are async; on
/// 2 shared cores running debug builds they can lag by seconds).
async fn wait_no_in_flight(store: &StateStore) -> bool {
    for _ in 0..200 {
        let l = store.probe(MODEL, &[]).await.unwrap();
        if l.workers.iter().all(|w| w.info.in_flight == 0) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn long_prompt(topic: &str) -> String {
    format!(
        "You are an expert on {topic}.\n{}",
        "Here is a long shared document line.\n".repeat(60)
    )
}
