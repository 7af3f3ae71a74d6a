//! Probes that held when the fleet was attacked by hand, kept as cheap
//! regression tests: ambiguous message framing (request smuggling), huge
//! header counts, and a non-UTF-8 body each get a 4xx (or a closed
//! connection), never reach a worker, and leave the router healthy.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, http, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Writes `raw` on a new connection and returns everything the router
/// answers until it closes the connection (or 5 s pass).
async fn exchange(r: &Router, raw: &[u8]) -> String {
    read_answer(r, raw, false).await
}

/// [`exchange`], read only until the first whole answer (its head and its
/// `content-length` body) is in: after refusing a request's head, the
/// router keeps the connection open, which [`exchange`] waits out.
async fn first_answer(r: &Router, raw: &[u8]) -> String {
    read_answer(r, raw, true).await
}

async fn read_answer(r: &Router, raw: &[u8], first_only: bool) -> String {
    let addr = r.url("").trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(raw).await;
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut buf).await {
            got.extend_from_slice(&buf[..n]);
            if first_only && whole_answer(&got) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// True when `got` holds an answer's head and its `content-length` body.
fn whole_answer(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some(end) = text.find("\r\n\r\n") else {
        return false;
    };
    let len = text[..end]
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    text.len() >= end + 4 + len
}

/// The status codes of every response in `answer`.
fn statuses(answer: &str) -> Vec<u16> {
    answer
        .match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| answer.get(i + 9..i + 12)?.parse().ok())
        .collect()
}

async fn fleet() -> (Valkey, Router, FakeWorker) {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(M.into());
    let r = Router::start(&valkey.url(), a).await;
    let worker = FakeWorker::start("w0").await;
    let hb = json!({"worker_id": "w0", "url": worker.url(), "model": M});
    assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);
    (valkey, r, worker)
}

async fn still_healthy(r: &Router) {
    let resp = http().get(r.url("/health")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

#[tokio::test]
async fn ambiguous_framing_is_refused_and_nothing_is_smuggled() {
    let (_v, r, worker) = fleet().await;
    let smuggled = "GET /v1/embeddings HTTP/1.1\r\nhost: x\r\n\r\n";
    let body = format!("0\r\n\r\n{smuggled}");
    let cases = [
        // Content-Length and Transfer-Encoding together.
        format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\
             transfer-encoding: chunked\r\n\r\n{body}"
        ),
        // Two different Content-Lengths.
        format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        ),
        // A transfer coding that is not chunked last.
        format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\n\
             transfer-encoding: chunked, identity\r\n\r\n{body}"
        ),
        // An obfuscated Transfer-Encoding header.
        format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\
             transfer-encoding : chunked\r\n\r\n{body}",
            body.len()
        ),
    ];
    for raw in &cases {
        let answer = exchange(&r, raw.as_bytes()).await;
        let codes = statuses(&answer);
        assert!(
            codes.iter().all(|c| (400..500).contains(c)),
            "{raw:?} answered {answer:?}"
        );
    }
    assert_eq!(
        worker.hits(),
        0,
        "a smuggled or ambiguous request reached the worker"
    );
    still_healthy(&r).await;
}

#[tokio::test]
async fn huge_header_counts_are_refused() {
    let (_v, r, worker) = fleet().await;
    for (count, size) in [(2_000, 10), (50, 4_000), (1, 200_000)] {
        let mut raw = String::from("POST /v1/completions HTTP/1.1\r\nhost: x\r\n");
        for i in 0..count {
            raw.push_str(&format!("x-h{i}: {}\r\n", "a".repeat(size)));
        }
        raw.push_str("content-length: 2\r\n\r\n{}");
        let answer = first_answer(&r, raw.as_bytes()).await;
        let codes = statuses(&answer);
        assert!(
            !codes.is_empty() && codes.iter().all(|c| (400..500).contains(c)),
            "{count} headers of {size} bytes answered {:?}",
            &answer[..answer.len().min(200)]
        );
    }
    assert_eq!(worker.hits(), 0);
    still_healthy(&r).await;
}

#[tokio::test]
async fn a_non_utf8_body_is_a_json_400() {
    let (_v, r, worker) = fleet().await;
    for body in [
        &b"\xff\xfe\x00{"[..],
        b"{\"model\": \"\xc3\x28\", \"prompt\": \"x\"}",
    ] {
        let resp = http()
            .post(r.url("/v1/completions"))
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], 400);
    }
    assert_eq!(worker.hits(), 0);
    still_healthy(&r).await;
}
