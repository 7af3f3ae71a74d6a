//! `loadtest dynamo-frontend` against a real sim-worker and a stand-in for
//! Dynamo's selection service (a Python package that CI does not install;
//! the stand-in answers its HTTP API as recorded from 1.6.1 in
//! loadtest/peers/README.md and records every call). Checks the protocol:
//! each worker registered with its KV-event endpoints, the token ids sent
//! to `select_and_reserve` equal to the sim's own (its render route for
//! chat, the prompt for token ids), the request forwarded and answered with
//! the sim's headers, then `prefill_complete` and the reservation freed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use loadtest::peers::dynamo::{FrontendArgs, frontend};
use loadtest::topology::{SimSettings, default_tokenizer_dir, start_sim};

use crate::common;

/// The calls the stand-in selector received: (route, body).
type Calls = Arc<Mutex<Vec<(String, Value)>>>;

struct Selector {
    calls: Calls,
    endpoint: String,
}

impl Selector {
    fn record(&self, route: String, body: Value) {
        self.calls.lock().unwrap().push((route, body));
    }
}

async fn prefill_complete(State(s): State<Arc<Selector>>, Path(id): Path<String>) -> StatusCode {
    s.record(format!("prefill_complete {id}"), Value::Null);
    StatusCode::OK
}

async fn free(State(s): State<Arc<Selector>>, Path(id): Path<String>) -> StatusCode {
    s.record(format!("free {id}"), Value::Null);
    StatusCode::OK
}

async fn stand_in(selector: Arc<Selector>) -> String {
    let app = Router::new()
        .route(
            "/workers",
            post(
                |State(s): State<Arc<Selector>>, Json(b): Json<Value>| async move {
                    s.record("workers".into(), b.clone());
                    (StatusCode::CREATED, Json(b))
                },
            ),
        )
        .route(
            "/ready",
            get(|| async { Json(json!({"ready": true, "schedulable_workers": 1})) }),
        )
        .route(
            "/select_and_reserve",
            post(
                |State(s): State<Arc<Selector>>, Json(b): Json<Value>| async move {
                    s.record("select".into(), b.clone());
                    Json(
                        json!({"selection_id": b["selection_id"], "worker_id": 1, "dp_rank": 0,
                            "endpoint": s.endpoint, "block_size": 16}),
                    )
                },
            ),
        )
        .route(
            "/reservations/{id}/prefill_complete",
            post(prefill_complete),
        )
        .route("/reservations/{id}", delete(free))
        .with_state(selector);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frontend_selects_forwards_and_frees() {
    let bins = common::binaries();
    let logs = tempfile::tempdir().unwrap();
    let settings = SimSettings {
        count: 1,
        num_blocks: 512,
        time_scale: 0.01,
        max_num_seqs: 16,
        extra_args: vec![],
    };
    let tok = default_tokenizer_dir();
    let sim = start_sim(
        &bins.sim,
        &settings,
        0,
        "qwen3",
        &tok,
        None,
        true,
        "t",
        logs.path(),
    )
    .await
    .unwrap();
    let kv = sim.kv_events.clone().expect("the sim publishes KV events");
    let calls: Calls = Arc::default();
    let selector = stand_in(Arc::new(Selector {
        calls: Arc::clone(&calls),
        endpoint: sim.url.clone(),
    }))
    .await;
    let port = fleet::free_port().unwrap();
    let args = FrontendArgs {
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        selector,
        model: "qwen3".into(),
        tokenizer_dir: tok,
        block_size: 16,
        total_kv_blocks: 512,
        workers: vec![format!("{}={},{}", sim.url, kv.publisher, kv.replay)],
    };
    tokio::spawn(frontend(args));
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/health")).send().await.is_err() {
        assert!(Instant::now() < deadline, "the frontend never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Registered with its KV-event endpoints.
    let registered = calls.lock().unwrap()[0].clone();
    assert_eq!(registered.0, "workers");
    assert_eq!(registered.1["endpoint"], sim.url);
    assert_eq!(registered.1["kv_events_endpoints"]["0"], kv.publisher);
    assert_eq!(registered.1["replay_endpoint"], kv.replay);
    assert_eq!(registered.1["block_size"], 16);

    // A streamed chat request: the ids selected on are the sim's own.
    let chat = json!({"model": "qwen3", "max_tokens": 3, "stream": true,
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Name three rivers of Europe, please."}]});
    let rendered: Value = http
        .post(format!("{}/v1/chat/completions/render", sim.url))
        .json(&chat)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let resp = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-sim-worker"], "sim-0");
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = resp.text().await.unwrap();
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");

    // A token-id completion: its ids as given.
    let prompt: Vec<u64> = (1000..1040).collect();
    let resp = http
        .post(format!("{base}/v1/completions"))
        .json(&json!({"model": "qwen3", "prompt": prompt, "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["usage"]["prompt_tokens"], 40);

    // Each selection was completed and freed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = calls.lock().unwrap().clone();
        let selects: Vec<&Value> = seen
            .iter()
            .filter(|c| c.0 == "select")
            .map(|c| &c.1)
            .collect();
        let done = selects.len() == 2
            && selects.iter().all(|s| {
                let id = s["selection_id"].as_str().unwrap();
                seen.iter().any(|c| c.0 == format!("prefill_complete {id}"))
                    && seen.iter().any(|c| c.0 == format!("free {id}"))
            });
        if done {
            assert_eq!(ids(&selects[0]["token_ids"]), ids(&rendered["token_ids"]));
            assert_eq!(ids(&selects[1]["token_ids"]), prompt);
            assert_eq!(selects[0]["model_name"], "qwen3");
            break;
        }
        assert!(Instant::now() < deadline, "calls: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
