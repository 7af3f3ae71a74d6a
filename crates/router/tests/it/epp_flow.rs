//! Flow control in `prefix-router epp`: while the only worker is at
//! `--max-in-flight-per-worker`, a request's ext_proc exchange is held
//! (no answer) until it is dispatched; a wait past `--queue-timeout` is an
//! immediate response with the status, `Retry-After` and the JSON body a
//! client of `serve` gets.

use crate::support;

use crate::envoy;

use std::net::SocketAddr;
use std::time::Duration;

use envoy::{Envoy, destination, exchange_duplex, immediate, request_body, request_headers};
use prefix_router::ext_proc::processing_response::Response;
use prefix_router::{BodyMode, FlowArgs};
use serde_json::json;
use state::{StateTtls, WorkerHeartbeat};
use support::{Router, Valkey, args, free_port, store, tokenizer_dir};

const MODEL: &str = "qwen3";

fn completion(prompt: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 4})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_exchange_is_held_then_refused_or_dispatched() {
    let valkey = Valkey::start();
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let hb = WorkerHeartbeat {
        worker_id: "w0".into(),
        url: "http://127.0.0.2:8000".into(),
        load: None,
    };
    store(&valkey, "pr", "test-probe", ttls)
        .heartbeat(MODEL, &hb)
        .await
        .unwrap();
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.flow = Box::new(FlowArgs {
        max_in_flight_per_worker: Some(1),
        queue_timeout: Some(Duration::from_millis(800)),
        ..FlowArgs::default()
    });
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let _picker = Router::start_epp(&valkey.url(), a, grpc, BodyMode::FullDuplexStreamed).await;
    // Loading the tokenizer takes a while on 2 shared cores.
    for _ in 0..600 {
        if tokio::net::TcpStream::connect(grpc).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The first takes the worker's only place (until its stream ends).
    let mut first = Envoy::open(grpc).await;
    let picked = destination(&exchange_duplex(&mut first, &completion("one"), true, None).await);
    assert_eq!(picked[0], "127.0.0.2:8000");
    // The second waits: no answer while the first holds the place, then
    // its timeout's immediate response.
    let mut second = Envoy::open(grpc).await;
    second
        .send(request_headers("/v1/completions", false, None, None))
        .await;
    second.send(request_body(&completion("two"), true)).await;
    let early = tokio::time::timeout(Duration::from_millis(400), second.rx.message()).await;
    assert!(early.is_err(), "answered while saturated: {early:?}");
    let answer = second.recv().await;
    let (status, error) = immediate(&answer);
    assert_eq!(
        (status, error["error"]["type"].as_str()),
        (503, Some("queue_timeout")),
        "{error}"
    );
    let Some(Response::ImmediateResponse(r)) = &answer.response else {
        unreachable!()
    };
    let retry = r
        .headers
        .as_ref()
        .unwrap()
        .set_headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key.eq_ignore_ascii_case("retry-after"))
        .map(|h| String::from_utf8(h.raw_value.clone()).unwrap());
    assert_eq!(retry.as_deref(), Some("1"));
    // A third waits, and is dispatched when the first's stream ends.
    let third = tokio::spawn(async move {
        let mut envoy = Envoy::open(grpc).await;
        destination(&exchange_duplex(&mut envoy, &completion("three"), true, None).await)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !third.is_finished(),
        "dispatched while the first holds the place"
    );
    first.close().await;
    let picked = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(picked[0], "127.0.0.2:8000");
}
