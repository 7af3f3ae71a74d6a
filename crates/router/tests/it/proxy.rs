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

async fn chat(f: &Fleet, body: &Value) -> (u16, String, Value) {
    send(f, "/v1/chat/completions", body).await
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

#[tokio::test]
async fn a_request_sharing_a_prefix_goes_where_the_prefix_is() {
    let f = fleet(3).await;
    let doc = long_prompt("routers");
    let (st, first, _) = complete(
        &f,
        json!({"model": MODEL, "prompt": format!("{doc}Question A?")}),
    )
    .await;
    assert_eq!(st, 200);
    assert!(wait_no_in_flight(&f.store).await);
    // The blocks the router claimed are exactly the engine's hashes of the prompt.
    let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
    let ids = pipeline
        .tokenizer
        .encode_plain(&format!("{doc}Question A?"), true)
        .unwrap();
    let hashes = pipeline.block_hashes(&ids, None, None);
    let l = f.store.probe(MODEL, &hashes).await.unwrap();
    let holder = l
        .workers
        .iter()
        .find(|w| w.info.worker_id == first)
        .unwrap();
    assert_eq!(
        holder.matched_blocks,
        ids.len() / 16,
        "claimed blocks differ from the engine's"
    );
    for i in 0..5 {
        let (st, w, body) = complete(
            &f,
            json!({"model": MODEL, "prompt": format!("{doc}Question {i}?")}),
        )
        .await;
        assert_eq!((st, w.as_str()), (200, first.as_str()), "{body}");
        assert!(wait_no_in_flight(&f.store).await);
    }
    // The body reaches the worker unchanged.
    let w = f.workers.iter().find(|w| w.name() == first).unwrap();
    assert_eq!(
        w.shared.bodies.lock().unwrap().last().unwrap()["prompt"],
        format!("{doc}Question 4?")
    );
}

#[tokio::test]
async fn lora_requests_go_to_the_base_models_workers_under_lora_hashes() {
    let f = fleet(2).await;
    let prompt = long_prompt("sql");
    let (st, worker, body) = complete(&f, json!({"model": "sql-lora", "prompt": prompt})).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        body["echo"]["model"], "sql-lora",
        "the body must reach the worker unchanged"
    );
    let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
    let ids = pipeline.tokenizer.encode_plain(&prompt, true).unwrap();
    let lora = LoraKey::new("sql-lora", "/adapters/sql-lora");
    let with_lora = pipeline.block_hashes(&ids, None, Some(lora));
    let base = pipeline.block_hashes(&ids, None, None);
    assert_ne!(with_lora[0], base[0]);
    let held = |hashes: Vec<_>| {
        let store = f.store.clone();
        let worker = worker.clone();
        async move {
            let l = store.probe(MODEL, &hashes).await.unwrap();
            l.workers
                .iter()
                .find(|w| w.info.worker_id == worker)
                .unwrap()
                .matched_blocks
        }
    };
    assert_eq!(held(with_lora).await, ids.len() / 16);
    assert_eq!(
        held(base).await,
        0,
        "a LoRA request must not claim the base model's blocks"
    );
}

#[tokio::test]
async fn token_id_prompts_are_routed_on_their_blocks() {
    let f = fleet(2).await;
    let ids: Vec<u32> = (1000..1400).collect();
    let (_, first, _) = complete(&f, json!({"model": MODEL, "prompt": ids})).await;
    assert!(wait_no_in_flight(&f.store).await);
    let mut longer = ids.clone();
    longer.extend(5000..5100);
    let (st, again, _) = complete(&f, json!({"model": MODEL, "prompt": [longer]})).await;
    assert_eq!((st, again), (200, first));
}

#[tokio::test]
async fn streams_pass_through_chunk_by_chunk_unchanged() {
    let f = fleet(1).await;
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": "hi", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.bytes_stream();
    let mut got = Vec::new();
    for chunk in SSE_CHUNKS {
        // The worker sends a chunk only when released: a buffering proxy
        // would never deliver the first one and the timeout would fail.
        f.workers[0].release.send(()).unwrap();
        let mut piece = Vec::new();
        while piece.len() < chunk.len() {
            let next = tokio::time::timeout(Duration::from_secs(10), body.next()).await;
            piece.extend_from_slice(&next.expect("chunk not flushed").unwrap().unwrap());
        }
        got.push(String::from_utf8(piece).unwrap());
    }
    assert_eq!(got, SSE_CHUNKS);
    drop(body);
    assert!(wait_no_in_flight(&f.store).await);
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_upstream_request() {
    let f = fleet(1).await;
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": "hi", "stream": true, "endless": true}))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    f.workers[0].release.send(()).unwrap();
    body.next().await.unwrap().unwrap();
    drop(body); // the client disconnects mid-stream
    f.workers[0].release.send(()).unwrap();
    f.workers[0].release.send(()).unwrap();
    let mut cancelled = false;
    for _ in 0..100 {
        if f.workers[0].shared.stream_cancelled.load(Ordering::SeqCst) {
            cancelled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cancelled, "the worker kept streaming to a client that left");
    assert!(
        wait_no_in_flight(&f.store).await,
        "in-flight count leaked on client abort"
    );
}

#[tokio::test]
async fn a_dead_worker_is_replaced_by_the_next_best_before_the_first_byte() {
    let f = fleet(1).await;
    // "dead" holds the prefix, so it ranks first, but nothing listens there.
    let dead = format!("http://127.0.0.1:{}", support::free_port().unwrap());
    register(&f.store, "dead", &dead).await;
    let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
    let prompt = long_prompt("retries");
    let ids = pipeline.tokenizer.encode_plain(&prompt, true).unwrap();
    f.store
        .stored(MODEL, "dead", &pipeline.block_hashes(&ids, None, None))
        .await
        .unwrap();
    let (st, worker, body) = complete(&f, json!({"model": MODEL, "prompt": prompt})).await;
    assert_eq!((st, worker.as_str()), (200, "w0"), "{body}");
    assert!(
        wait_no_in_flight(&f.store).await,
        "the failed attempt's in-flight count leaked"
    );
}

#[tokio::test]
async fn statuses_and_bodies_pass_through_and_other_routes_are_forwarded() {
    let f = fleet(1).await;
    *f.workers[0].shared.status.lock().unwrap() = Some(axum::http::StatusCode::IM_A_TEAPOT);
    let (st, _, body) = complete(&f, json!({"model": MODEL, "prompt": "x"})).await;
    assert_eq!(st, 418);
    assert_eq!(body["worker"], "w0");
    *f.workers[0].shared.status.lock().unwrap() = None;
    let resp = http()
        .post(f.router.url("/v1/embeddings?x=1"))
        .json(&json!({"model": MODEL, "input": "abc"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["path"], "/v1/embeddings");
    assert!(wait_no_in_flight(&f.store).await);
    let models: Value = http()
        .get(f.router.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);
}

#[tokio::test]
async fn the_w3c_trace_context_reaches_the_worker_unchanged() {
    let f = fleet(2).await;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let state = "vendor=abc,other=xyz";
    // A fake worker streams a chunk per release.
    for w in &f.workers {
        for _ in SSE_CHUNKS {
            w.release.send(()).unwrap();
        }
    }
    for stream in [false, true] {
        let resp = http()
            .post(f.router.url("/v1/completions"))
            .header("traceparent", parent)
            .header("tracestate", state)
            .json(&json!({"model": MODEL, "prompt": long_prompt("trace"), "max_tokens": 2, "stream": stream}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let _ = resp.bytes().await;
    }
    let seen: Vec<_> = f
        .workers
        .iter()
        .flat_map(|w| w.shared.trace.lock().unwrap().clone())
        .collect();
    assert_eq!(seen.len(), 2);
    for (p, s) in seen {
        assert_eq!(p.as_deref(), Some(parent));
        assert_eq!(s.as_deref(), Some(state));
    }
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let f = fleet(1).await;
    for (body, want) in [
        (json!({"prompt": "no model"}), 400),
        (json!({"model": MODEL, "prompt": [-1]}), 400),
        (json!({"model": MODEL}), 400),
        (json!({"model": "nobody-serves-this", "prompt": "x"}), 404),
    ] {
        let (st, _, resp) = complete(&f, body.clone()).await;
        assert_eq!(st, want, "{body}: {resp}");
        assert!(
            resp["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{resp}"
        );
    }
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(f.workers[0].hits(), 0, "a bad request reached a worker");
}

#[tokio::test]
async fn requests_are_still_answered_while_valkey_is_down() {
    let mut f = fleet(2).await;
    let (st, _, _) = complete(&f, json!({"model": MODEL, "prompt": "warm up"})).await;
    assert_eq!(st, 200);
    f.valkey.kill();
    for i in 0..4 {
        let (st, w, body) = complete(
            &f,
            json!({"model": MODEL, "prompt": format!("during outage {i}")}),
        )
        .await;
        assert_eq!(st, 200, "{body}");
        assert!(w == "w0" || w == "w1");
    }
}

#[tokio::test]
async fn requests_are_still_answered_while_valkey_refuses_writes() {
    let f = fleet(2).await;
    let (st, _, _) = complete(&f, json!({"model": MODEL, "prompt": "warm up"})).await;
    assert_eq!(st, 200);
    // Out of memory with no eviction: every script that writes gets OOM,
    // as it would get READONLY from a demoted primary or LOADING while an
    // AOF loads. Those are "not now", not "bad request".
    let mut conn = f.valkey.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    for i in 0..4 {
        let (st, w, body) = complete(
            &f,
            json!({"model": MODEL, "prompt": format!("while full {i}")}),
        )
        .await;
        assert_eq!(st, 200, "{body}");
        assert!(w == "w0" || w == "w1");
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut conn)
        .unwrap();
}

/// A chat case of the fixtures produced by vLLM 0.33.0.
fn fixture(name: &str) -> (Value, Vec<u32>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tokenize/tests/fixtures/qwen3_chat.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = all["chat"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap();
    let ids = case["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let mut request = case["request"].clone();
    request["model"] = json!(MODEL);
    (request, ids)
}

#[tokio::test]
async fn chat_requests_claim_exactly_the_blocks_vllm_would_hash() {
    let f = fleet(3).await;
    for name in [
        "long_conversation_with_tools_and_reasoning",
        "tools_with_system",
        "unicode_and_emoji",
    ] {
        let (request, vllm_ids) = fixture(name);
        let (st, worker, body) = chat(&f, &request).await;
        assert_eq!(st, 200, "{name}: {body}");
        let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
        let hashes = pipeline.block_hashes(&vllm_ids, None, None);
        let l = f.store.probe(MODEL, &hashes).await.unwrap();
        let held = l
            .workers
            .iter()
            .find(|w| w.info.worker_id == worker)
            .unwrap()
            .matched_blocks;
        assert_eq!(
            held,
            vllm_ids.len() / 16,
            "{name}: claimed blocks differ from vLLM's"
        );
        assert!(wait_no_in_flight(&f.store).await);
    }
}

#[tokio::test]
async fn the_next_turn_of_a_conversation_follows_its_prefix() {
    let f = fleet(3).await;
    let system = "You are a meticulous assistant. ".repeat(40);
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "Hello there"}),
    ];
    let (_, first, _) = chat(&f, &json!({"model": MODEL, "messages": messages})).await;
    // A request still counted in flight would rightly push the next away.
    assert!(wait_no_in_flight(&f.store).await);
    for turn in 0..3 {
        messages.push(json!({"role": "assistant", "content": format!("Answer {turn}")}));
        messages.push(json!({"role": "user", "content": format!("Follow-up {turn}")}));
        let (st, w, body) = chat(&f, &json!({"model": MODEL, "messages": messages})).await;
        assert_eq!((st, w.as_str()), (200, first.as_str()), "{body}");
        assert!(wait_no_in_flight(&f.store).await);
    }
}

#[tokio::test]
async fn chat_the_router_cannot_reproduce_is_routed_by_load_and_invalid_chat_is_refused() {
    let f = fleet(1).await;
    let image = json!({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]});
    let (st, _, body) = chat(&f, &image).await;
    assert_eq!(st, 200, "{body}");
    let metrics = http()
        .get(f.router.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("prefix_router_chat_render_unsupported_total"),
        "not reported"
    );
    let object_arguments = json!({"model": MODEL, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]});
    let (st, _, body) = chat(&f, &object_arguments).await;
    assert_eq!(st, 400, "{body}");
    assert_eq!(
        f.workers[0].hits(),
        1,
        "the invalid request reached a worker"
    );
}

#[tokio::test]
async fn explain_shows_the_decision_without_changing_state() {
    let f = fleet(3).await;
    let doc = long_prompt("explanations");
    let (_, holder, _) = complete(&f, json!({"model": MODEL, "prompt": format!("{doc}Q1")})).await;
    assert!(wait_no_in_flight(&f.store).await);
    let before = support::raw_state(&f.valkey, "pr", MODEL);
    let prompt = format!("{doc}Q2");
    let resp = http()
        .post(f.router.url("/admin/explain"))
        .bearer_auth(support::TOKEN)
        .json(&json!({"model": MODEL, "prompt": prompt}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(
        support::raw_state(&f.valkey, "pr", MODEL),
        before,
        "explain changed the state"
    );
    assert_eq!(e["chosen"]["worker_id"], holder.as_str(), "{e}");
    assert!(
        e["chosen"]["reason"].as_str().unwrap().starts_with("hit"),
        "{e}"
    );
    assert_eq!(e["candidates"].as_array().unwrap().len(), 3);
    let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
    let ids = pipeline.tokenizer.encode_plain(&prompt, true).unwrap();
    let want: Vec<String> = pipeline
        .block_hashes(&ids, None, None)
        .iter()
        .map(|h| h.to_hex())
        .collect();
    assert_eq!(e["block_hashes"], json!(want));
    assert_eq!(e["prompt_tokens"], ids.len());
    let metrics = http()
        .get(f.router.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "prefix_router_decisions_total",
        "prefix_router_route_phase_seconds",
        "prefix_router_upstream_responses_total",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
}

#[tokio::test]
async fn worker_load_is_read_from_vllms_orca_header() {
    let f = fleet(1).await;
    f.workers[0].shared.orca_waiting.store(3, Ordering::SeqCst);
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": "load report please"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers().get("endpoint-load-metrics").is_none(),
        "the router's own ORCA request leaked to the client"
    );
    let mut seen = None;
    for _ in 0..50 {
        let l = f.store.probe(MODEL, &[]).await.unwrap();
        let load = l.workers[0].info.load;
        if load.num_requests_waiting == 3 {
            seen = Some(load);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let load = seen.expect("ORCA load not recorded");
    assert!((load.kv_cache_usage_perc - 0.4).abs() < 1e-9);
    // A client that asks for the header itself gets it.
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .header("endpoint-load-metrics-format", "TEXT")
        .json(&json!({"model": MODEL, "prompt": "mine"}))
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("endpoint-load-metrics").is_some());
}
