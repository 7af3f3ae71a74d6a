//! Connections: a kept-alive client that stays idle past `--idle-timeout`
//! is closed (an active one, or a long streamed answer, is not), and past
//! `--max-connections` a new connection gets a 503 JSON answer and is
//! closed at once, while the connections already open keep working. Before,
//! 20,000 idle keep-alive connections exhausted the router's file
//! descriptors and every other request timed out.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, http, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nhost: r\r\n\r\n";

fn addr(r: &Router) -> String {
    r.url("").trim_start_matches("http://").to_owned()
}

/// Reads one answer to `GET /health` (a small JSON body with a length).
async fn read_answer(s: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(
            n > 0,
            "closed before answering: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if text.ends_with('}') {
            return text;
        }
    }
}

/// True when the peer closes the connection within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_active_ones_are_not() {
    let valkey = Valkey::start();
    let mut a = args();
    a.exposure.idle_timeout = Some(Duration::from_millis(400));
    let r = Router::start(&valkey.url(), a).await;

    // Active: a request every 100 ms for 2 s keeps the connection.
    let mut active = TcpStream::connect(addr(&r)).await.unwrap();
    for _ in 0..20 {
        active.write_all(HEALTH).await.unwrap();
        assert!(read_answer(&mut active).await.starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Idle: closed after the idle timeout.
    assert!(
        closed_within(&mut active, Duration::from_secs(5)).await,
        "an idle connection stayed open"
    );
}

#[tokio::test]
async fn a_long_stream_is_not_cut_as_idle() {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(M.into());
    a.exposure.idle_timeout = Some(Duration::from_millis(300));
    let r = Router::start(&valkey.url(), a).await;
    let worker = FakeWorker::start("w0").await;
    let hb = json!({"worker_id": "w0", "url": worker.url(), "model": M});
    assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&json!({"model": M, "prompt": "hi", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // Three chunks, each held back longer than the idle timeout.
    let releaser = worker.release.clone();
    tokio::spawn(async move {
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let _ = releaser.send(());
        }
    });
    let body = resp.text().await.unwrap();
    assert!(body.ends_with("data: [DONE]\n\n"), "{body:?}");
}

#[tokio::test]
async fn past_the_cap_a_connection_is_refused_with_a_503() {
    let valkey = Valkey::start();
    let mut a = args();
    a.exposure.max_connections = Some(4);
    let r = Router::start(&valkey.url(), a).await;
    let mut open = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr(&r)).await.unwrap();
        s.write_all(HEALTH).await.unwrap();
        assert!(read_answer(&mut s).await.starts_with("HTTP/1.1 200"));
        open.push(s);
    }
    let mut surplus = TcpStream::connect(addr(&r)).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), surplus.read_to_string(&mut answer))
        .await
        .expect("a refusal, then a close")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let body: serde_json::Value =
        serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(body["error"]["type"], "too_many_connections");
    assert_eq!(body["error"]["code"], 503);

    // The open ones still work; closing one makes room for a new one.
    open[0].write_all(HEALTH).await.unwrap();
    assert!(read_answer(&mut open[0]).await.starts_with("HTTP/1.1 200"));
    drop(open.pop());
    let mut again = None;
    for _ in 0..50 {
        let mut s = TcpStream::connect(addr(&r)).await.unwrap();
        s.write_all(HEALTH).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.unwrap_or(0);
        if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200") {
            again = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(again.is_some(), "no room after a connection closed");
}
