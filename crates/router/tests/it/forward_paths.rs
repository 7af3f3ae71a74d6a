//! Only vLLM's `/v1` inference routes (and the operator's `--forward-path`
//! list) reach a worker, and no path can leave `/v1/` on the way: every
//! traversal form found by probing (raw and encoded dot segments, encoded
//! slashes, absolute-form targets) is a 400 that never reaches the worker.
//! Requests are written raw on a TCP stream, since an HTTP client would
//! normalize the very paths under test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::fake_worker::FakeWorker;
use support::{Router, Valkey, args};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MODEL: &str = "qwen3";

/// Writes `method target` with a JSON body as raw HTTP/1.1 and returns the
/// status and the JSON body of the answer.
async fn raw(router: &Router, method: &str, target: &str, body: &Value) -> (u16, Value) {
    let addr = router.url("").trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(addr.trim_end_matches('/'))
        .await
        .unwrap();
    let body = body.to_string();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    let status = text[9..12].parse().unwrap();
    let (_, json) = text.split_once("\r\n\r\n").unwrap();
    // The JSON error bodies are small: no chunked encoding to undo beyond
    // a length line, so take the outermost object.
    let json = &json[json.find('{').unwrap_or(0)..=json.rfind('}').unwrap_or(0)];
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}

async fn fleet(extra_paths: &[&str]) -> (Valkey, Router, FakeWorker) {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(MODEL.into());
    a.exposure.forward_paths = extra_paths.iter().map(|p| (*p).to_owned()).collect();
    let router = Router::start(&valkey.url(), a).await;
    let worker = FakeWorker::start("w0").await;
    worker.register_in(&valkey, MODEL).await;
    (valkey, router, worker)
}

#[tokio::test]
async fn no_path_leaves_v1_and_only_listed_routes_are_forwarded() {
    let (_valkey, router, worker) = fleet(&["/v1/custom", "/v1/jobs/*"]).await;
    let body = json!({"model": MODEL, "input": "x"});
    for target in [
        "/v1/../sim/resync",
        "/v1/../metrics",
        "/v1/%2e%2e/admin%2fx",
        "/v1/%2E%2E/%2e%2e/x",
        "/v1/./embeddings",
        "/v1/embeddings/..",
        "/v1/a%2fb",
        "/v1/a%5c..%5cb",
        "http://evil.example/v1/../../x",
    ] {
        let (status, answer) = raw(&router, "POST", target, &body).await;
        assert_eq!(status, 400, "{target}: {answer}");
        assert_eq!(answer["error"]["type"], "invalid_path", "{target}");
        assert_eq!(answer["error"]["code"], 400, "{target}");
    }
    for target in ["/v1/load_lora_adapter", "/v1/unknown", "/v1/custom/x"] {
        let (status, answer) = raw(&router, "POST", target, &body).await;
        assert_eq!(status, 404, "{target}: {answer}");
        assert_eq!(answer["error"]["type"], "not_found", "{target}");
    }
    assert_eq!(worker.hits(), 0, "a refused path reached the worker");

    for (target, path) in [
        ("/v1/embeddings", "/v1/embeddings"),
        ("/v1/rerank?top_n=2", "/v1/rerank"),
        ("/v1/custom", "/v1/custom"),
        ("/v1/jobs/7", "/v1/jobs/7"),
    ] {
        let (status, answer) = raw(&router, "POST", target, &body).await;
        assert_eq!(status, 200, "{target}: {answer}");
        assert_eq!(answer["path"], path, "{target}");
    }
    assert_eq!(
        *worker.shared.paths.lock().unwrap(),
        ["/v1/embeddings", "/v1/rerank", "/v1/custom", "/v1/jobs/7"]
    );
}

#[test]
fn a_bad_forward_path_stops_the_router_from_starting() {
    let mut a = args();
    a.internal_token = Some("t".into());
    a.exposure.forward_paths = vec!["/v1/../admin".into()];
    let err = prefix_router::ServeConfig::resolve(a).unwrap_err();
    assert!(err.to_string().contains("forward path"), "{err:#}");
}
