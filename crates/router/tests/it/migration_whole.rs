//! Migration of non-streamed answers (issue 29): the router streams them
//! from its workers and answers with one JSON object, so a worker that
//! fails mid-answer hands the answer over like a streamed one's. Real
//! `sim-worker` processes, a real router, a real valkey-server. A
//! never-failing answer is the worker's own, field for field; one that
//! cannot move is a 502 JSON error, never a cut body.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use prefix_router::MigrationArgs;
use serde_json::{Value, json};
use support::{Router, Valkey, http};

use super::migration::{MODEL, doc, migrated, router, set_fault, start_sim, wait_live};

/// A non-streamed answer: status, the worker that served it, the body.
#[derive(Debug)]
struct Whole {
    status: u16,
    worker: Option<String>,
    content_type: String,
    body: Value,
}

async fn post(url: String, body: &Value) -> Whole {
    let resp = http().post(url).json(body).send().await.unwrap();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (worker, content_type) = (
        header("x-prefix-router-worker"),
        header("content-type").unwrap_or_default(),
    );
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("a whole body, not a cut one");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"));
    Whole {
        status,
        worker,
        content_type,
        body,
    }
}

fn completion(topic: &str, ids: bool) -> Value {
    json!({"model": MODEL, "prompt": doc(topic), "max_tokens": 16, "return_token_ids": ids})
}

fn chat(topic: &str, ids: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": doc(topic)}],
           "max_completion_tokens": 16, "stream": false, "return_token_ids": ids})
}

fn bodies(topic: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "/v1/completions",
            completion(&format!("{topic} plain"), false),
        ),
        ("/v1/completions", completion(&format!("{topic} ids"), true)),
        (
            "/v1/chat/completions",
            chat(&format!("{topic} chat"), false),
        ),
        (
            "/v1/chat/completions",
            chat(&format!("{topic} chat ids"), true),
        ),
    ]
}

/// `v` without what differs between two answers to one request (the
/// request's id and second).
fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    let o = v.as_object_mut().unwrap();
    o.remove("id");
    o.remove("created");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_never_failing_answer_is_the_workers_own_field_for_field() {
    let valkey = Valkey::start();
    let r = router(&valkey, MigrationArgs::default()).await;
    let a = start_sim(&r, "a").await;
    wait_live(&r, &["a"]).await;
    for (path, body) in bodies("direct") {
        // Cold, then warm: the routed answer and the second direct one
        // find the same cached prefix.
        let cold = post(format!("{}{path}", a.url), &body).await;
        assert_eq!(cold.status, 200, "{cold:?}");
        let routed = post(r.url(path), &body).await;
        let direct = post(format!("{}{path}", a.url), &body).await;
        assert_eq!(routed.status, 200, "{routed:?}");
        assert_eq!(routed.worker.as_deref(), Some("a"));
        assert_eq!(routed.content_type, direct.content_type);
        assert_eq!(
            comparable(&routed.body),
            comparable(&direct.body),
            "{path}: routed vs direct"
        );
        let id = routed.body["id"].as_str().unwrap();
        let prefix = if path.contains("chat") {
            "chatcmpl-"
        } else {
            "cmpl-"
        };
        assert!(id.starts_with(prefix), "{id}");
        assert!(routed.body["created"].as_u64().unwrap() > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_non_streamed_answer_cut_mid_way_moves_and_equals_its_twin() {
    let valkey = Valkey::start();
    let r = router(&valkey, MigrationArgs::default()).await;
    let a = start_sim(&r, "a").await;
    wait_live(&r, &["a"]).await;
    let bodies = bodies("moved");
    let mut twins = Vec::new();
    for (path, body) in &bodies {
        let twin = post(r.url(path), body).await;
        assert_eq!(twin.status, 200, "{twin:?}");
        assert_eq!(twin.worker.as_deref(), Some("a"));
        twins.push(twin);
    }
    let _b = start_sim(&r, "b").await;
    wait_live(&r, &["a", "b"]).await;
    set_fault(&a, json!({"after_tokens": 5, "kind": "cut"})).await;
    for ((path, body), twin) in bodies.iter().zip(&twins) {
        let moved = post(r.url(path), body).await;
        assert_eq!(moved.status, 200, "{path}: {moved:?}");
        assert_eq!(moved.worker.as_deref(), Some("a"), "{path} went elsewhere");
        assert_eq!(moved.content_type, "application/json");
        let (m, t) = (&moved.body, &twin.body);
        assert_eq!(m["choices"], t["choices"], "{path}: moved vs twin");
        assert_eq!(m["object"], t["object"]);
        assert_eq!(m["model"], t["model"]);
        assert_eq!(m.get("prompt_token_ids"), t.get("prompt_token_ids"));
        for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            assert_eq!(m["usage"][k], t["usage"][k], "{path} usage.{k}");
        }
        assert_eq!(m["usage"]["completion_tokens"], 16);
        let asked = body["return_token_ids"] == true;
        let ids = m["choices"][0].get("token_ids").and_then(Value::as_array);
        assert_eq!(ids.map(Vec::len), asked.then_some(16), "{m}");
        assert!(
            m["id"].as_str().unwrap().contains("-a-"),
            "the first worker's id: {m}"
        );
    }
    let (migrated, _) = migrated(&r).await;
    assert!(migrated >= 4, "{migrated}");
}

/// A worker that breaks a non-streamed answer after its headers and
/// the start of its JSON: the client gets a 502 JSON error, not a 200
/// with a cut body (as it did), with migration off and when the answer
/// is forwarded as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_non_streamed_answer_that_cannot_move_is_a_502_json_error() {
    for limit in [Some(0), None] {
        let valkey = Valkey::start();
        let mut a = support::args();
        a.model = Some(MODEL.into());
        a.tokenizer_dir = Some(support::tokenizer_dir());
        a.migration.migration_limit = limit;
        let r = Router::start(&valkey.url(), a).await;
        let w = support::fake_worker::FakeWorker::start("w0").await;
        let store = support::store(&valkey, "pr", "test-cut", Default::default());
        let hb = state::WorkerHeartbeat {
            worker_id: w.name().into(),
            url: w.url(),
            load: None,
        };
        store.heartbeat(MODEL, &hb).await.unwrap();
        w.shared
            .cut_body
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let failed = post(r.url("/v1/completions"), &completion("cut body", false)).await;
        assert_eq!(failed.status, 502, "{limit:?}: {failed:?}");
        assert_eq!(failed.worker.as_deref(), Some("w0"));
        assert_eq!(failed.content_type, "application/json");
        let msg = failed.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("the worker failed mid-answer"), "{msg}");
        let why = match limit {
            Some(0) => "migration is off",
            _ => "not streamed",
        };
        assert!(msg.contains(why), "{msg}");
        assert_eq!(failed.body["error"]["type"], "worker_failed");
    }
}
