//! What only the router may set never comes from a client (issue 30,
//! defects 1 and 2): a client's `kv_transfer_params` and reserved headers
//! (`protocol::headers::RESERVED`) are removed on every path: `serve`'s
//! colocated requests (completions, chat, another forwarded route), its
//! disaggregated ones (prefill and decode worker, the prefill failed or
//! not), and the endpoint picker's answers (full-duplex and buffered).
//! Real router, real valkey-server, capturing workers over loopback HTTP,
//! the picker over real gRPC.

use crate::support;

use crate::envoy;

use std::net::SocketAddr;
use std::time::Duration;

use envoy::{
    Envoy, common, destination, exchange_duplex_handing_back, header_set, open_buffered,
    request_body,
};
use prefix_router::ext_proc::body_mutation;
use protocol::headers::{DESTINATION_HEADER, PREFILLER_HEADER, RESERVED};
use serde_json::{Value, json};
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, free_port, http, post, tokenizer_dir};

/// What a client puts in to steer a decode worker's KV pull (issue 30).
fn client_params() -> Value {
    json!({"do_remote_prefill": true, "remote_host": "192.0.2.66", "remote_port": 5600,
        "remote_engine_id": "x", "remote_block_ids": [[1, 2]]})
}

/// A router for [`M`] with the Qwen3 tokenizer and long leases.
async fn router(valkey: &Valkey) -> Router {
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(600));
    Router::start(&valkey.url(), a).await
}

async fn join(r: &Router, w: &FakeWorker, role: Option<&str>) {
    let mut hb = json!({"worker_id": w.name(), "url": w.url(), "model": M});
    if let Some(role) = role {
        hb["role"] = role.into();
    }
    let (st, v) = post(r, "/internal/heartbeat", &hb).await;
    assert_eq!(st, 200, "{v}");
}

/// Sends `body` to `path` with every reserved header and one of the
/// client's own; the answer's status.
async fn send(r: &Router, path: &str, body: &Value) -> u16 {
    let mut req = http()
        .post(r.url(path))
        .json(body)
        .header("x-client-own", "kept");
    for name in RESERVED {
        req = req.header(name, "127.0.0.1:9");
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    resp.bytes().await.unwrap();
    status
}

/// Asserts that no request `w` received carried a reserved header or the
/// client's `kv_transfer_params`, and that the client's own header came
/// through (the capture works); how many requests it received.
fn assert_clean(w: &FakeWorker) -> usize {
    let headers = w.shared.headers.lock().unwrap().clone();
    for h in &headers {
        for name in RESERVED {
            assert!(h.get(name).is_none(), "{}: {name} reached it", w.name());
        }
        assert_eq!(h["x-client-own"], "kept", "{}", w.name());
    }
    for body in w.shared.bodies.lock().unwrap().iter() {
        let params = &body["kv_transfer_params"];
        assert_ne!(params["remote_host"], "192.0.2.66", "{}: {body}", w.name());
        assert_ne!(params["remote_engine_id"], "x", "{}: {body}", w.name());
    }
    headers.len()
}

fn prompt(topic: &str) -> String {
    (0..30)
        .map(|i| format!("Line {i} of the {topic} notes, long enough for blocks.\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn colocated_requests_reach_the_worker_without_router_only_fields() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let w = FakeWorker::start("w0").await;
    join(&r, &w, None).await;
    for (path, body) in [
        (
            "/v1/completions",
            json!({"model": M, "prompt": prompt("a"), "kv_transfer_params": client_params()}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": M, "messages": [{"role": "user", "content": prompt("b")}],
                "kv_transfer_params": client_params()}),
        ),
        (
            "/v1/embeddings",
            json!({"model": M, "input": "x", "kv_transfer_params": client_params()}),
        ),
    ] {
        assert_eq!(send(&r, path, &body).await, 200, "{path}");
    }
    assert_eq!(assert_clean(&w), 3);
    // Everything else the client sent came through, in its order.
    let last = w.shared.bodies.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last, json!({"model": M, "input": "x"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disaggregated_requests_carry_only_the_routers_params() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let p = FakeWorker::start("p0").await;
    let handoff = json!({"do_remote_prefill": true, "do_remote_decode": false,
        "remote_block_ids": [[7, 8]], "remote_engine_id": "p0", "remote_host": "127.0.0.1",
        "remote_port": 5601});
    *p.shared.kv_transfer_params.lock().unwrap() = Some(handoff.clone());
    let d = FakeWorker::start("d0").await;
    join(&r, &p, Some("prefill")).await;
    join(&r, &d, Some("decode")).await;

    let chat = json!({"model": M, "messages": [{"role": "user", "content": prompt("c")}],
        "kv_transfer_params": client_params()});
    assert_eq!(send(&r, "/v1/chat/completions", &chat).await, 200);
    let completion =
        json!({"model": M, "prompt": prompt("d"), "kv_transfer_params": client_params()});
    assert_eq!(send(&r, "/v1/completions", &completion).await, 200);
    // The prefill worker got the router's request for a remote decode; the
    // decode worker the prefill's answer.
    for body in p.shared.bodies.lock().unwrap().iter() {
        assert_eq!(
            body["kv_transfer_params"],
            protocol::kv_transfer::prefill_request()
        );
    }
    for body in d.shared.bodies.lock().unwrap().iter() {
        assert_eq!(body["kv_transfer_params"], handoff);
    }

    // The prefill fails (no params in its answer): the decode worker
    // computes the prompt, from a body without the client's params.
    *p.shared.kv_transfer_params.lock().unwrap() = None;
    let other = json!({"model": M, "prompt": prompt("e"), "kv_transfer_params": client_params()});
    assert_eq!(send(&r, "/v1/completions", &other).await, 200);
    let last = d.shared.bodies.lock().unwrap().last().cloned().unwrap();
    assert!(last.get("kv_transfer_params").is_none(), "{last}");
    assert_eq!(last["prompt"], other["prompt"]);

    assert_eq!(assert_clean(&p), 3);
    assert_eq!(assert_clean(&d), 3);
}

/// A picker for [`M`] with two colocated workers (nothing listens there).
async fn picker(valkey: &Valkey) -> (Router, SocketAddr) {
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(600));
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let r = Router::start_epp(
        &valkey.url(),
        a,
        grpc,
        prefix_router::BodyMode::FullDuplexStreamed,
    )
    .await;
    for (id, endpoint) in [("w0", "127.0.0.2:8000"), ("w1", "127.0.0.3:8000")] {
        let hb = json!({"worker_id": id, "url": format!("http://{endpoint}"), "model": M});
        let (st, v) = post(&r, "/internal/heartbeat", &hb).await;
        assert_eq!(st, 200, "{v}");
    }
    (r, grpc)
}

/// Asserts the picker's answer removes every reserved header it does not
/// set itself, and sets `content-length` to `len`.
fn assert_removes_reserved(answer: &prefix_router::ext_proc::ProcessingResponse, len: usize) {
    for name in RESERVED {
        let (set, removed) = header_set(answer, name);
        if name == DESTINATION_HEADER {
            assert!(set.is_some(), "{name}");
        } else {
            assert!(
                removed && set.is_none(),
                "{name}: set {set:?}, removed {removed}"
            );
        }
    }
    assert_eq!(
        header_set(answer, "content-length").0,
        Some(len.to_string())
    );
    assert!(header_set(answer, PREFILLER_HEADER).1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_picker_hands_on_neither_client_params_nor_reserved_headers() {
    let valkey = Valkey::start();
    let (_picker, grpc) = picker(&valkey).await;
    let sent = serde_json::to_vec(
        &json!({"model": M, "prompt": prompt("f"), "kv_transfer_params": client_params()}),
    )
    .unwrap();
    let want = serde_json::to_vec(&json!({"model": M, "prompt": prompt("f")})).unwrap();

    // Full duplex: the body handed back is the one without them.
    let mut envoy = Envoy::open(grpc).await;
    let (answer, body) = exchange_duplex_handing_back(&mut envoy, &sent, true, None).await;
    assert_eq!(body, want);
    assert_eq!(destination(&answer).len(), 2);
    assert_removes_reserved(&answer, want.len());
    envoy.close().await;

    // Buffered: the body's answer replaces it.
    let mut envoy = open_buffered(grpc).await;
    envoy.send(request_body(&sent, true)).await;
    let answer = envoy.recv().await;
    assert_removes_reserved(&answer, want.len());
    let mutation = common(&answer).unwrap().body_mutation.clone().unwrap();
    assert_eq!(
        mutation.mutation,
        Some(body_mutation::Mutation::Body(want.clone()))
    );
    envoy.close().await;

    // A body without them is handed back as sent, its length unchanged.
    let mut envoy = Envoy::open(grpc).await;
    let (answer, body) = exchange_duplex_handing_back(&mut envoy, &want, true, None).await;
    assert_eq!(body, want);
    assert_eq!(header_set(&answer, "content-length").0, None);
    envoy.close().await;
}
