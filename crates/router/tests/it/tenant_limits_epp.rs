//! Tenants' limits when the router is the gateway's endpoint picker: the
//! same admission as `serve`, a refusal as an immediate response with the
//! same status, headers and body (driven over real gRPC as Envoy does).

use crate::support;

use crate::envoy;

use std::net::SocketAddr;
use std::time::Duration;

use envoy::{Envoy, client_request, destination, handed_back, immediate, modes, request_body};
use prefix_router::ext_proc::processing_response::Response;
use prefix_router::ext_proc::{BodySendMode, ProcessingResponse};
use prefix_router::{AdmissionArgs, BodyMode};
use serde_json::json;
use state::{StateTtls, WorkerHeartbeat};
use support::{Router, Valkey, args, free_port, store};

const MODEL: &str = "m";

/// Sends one completion as tenant `key` in full-duplex mode; returns the
/// picker's first answer.
async fn exchange(grpc: SocketAddr, key: &str) -> (Envoy, Vec<ProcessingResponse>) {
    let mut envoy = Envoy::open(grpc).await;
    let auth = format!("Bearer {key}");
    let config = modes(
        BodySendMode::FullDuplexStreamed,
        BodySendMode::FullDuplexStreamed,
    );
    let extra = [
        ("content-type", "application/json"),
        ("authorization", &auth),
    ];
    envoy
        .send(client_request("/v1/completions", &extra, config))
        .await;
    let body =
        serde_json::to_vec(&json!({"model": MODEL, "prompt": "hi", "max_tokens": 4})).unwrap();
    envoy.send(request_body(&body, true)).await;
    let first = envoy.recv().await;
    let mut answers = vec![first];
    if matches!(answers[0].response, Some(Response::RequestHeaders(_))) {
        loop {
            answers.push(envoy.recv().await);
            if handed_back(&answers[1..]).1 {
                break;
            }
        }
    }
    (envoy, answers)
}

#[tokio::test]
async fn a_refusal_is_an_immediate_429_with_openais_headers() {
    let valkey = Valkey::start();
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let s = store(&valkey, "pr", "test-probe", ttls);
    for i in 0..2 {
        let hb = WorkerHeartbeat {
            worker_id: format!("w{i}"),
            url: format!("http://127.0.0.{}:8000", i + 2),
            load: None,
        };
        s.heartbeat(MODEL, &hb).await.unwrap();
    }
    let mut a = args();
    a.model = Some(MODEL.into());
    // One request at once per tenant (2 per minute).
    a.admission = Box::new(AdmissionArgs {
        tenant_requests_per_minute: Some(2),
        ..AdmissionArgs::default()
    });
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let picker = Router::start_epp(&valkey.url(), a, grpc, BodyMode::FullDuplexStreamed).await;
    // The first is picked.
    let mut first = None;
    for _ in 0..100 {
        if let Ok(channel) = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
        {
            drop(channel);
            first = Some(exchange(grpc, "sk-a").await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (envoy, answers) = first.expect("the picker serves");
    assert!(!destination(&answers[0]).is_empty(), "{answers:?}");
    envoy.close().await;
    // The second is refused at once, as serve would.
    let (mut envoy, answers) = exchange(grpc, "sk-a").await;
    let (status, body) = immediate(&answers[0]);
    assert_eq!(status, 429);
    assert_eq!(body["error"]["type"], "rate_limit_exceeded");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    let Some(Response::ImmediateResponse(r)) = &answers[0].response else {
        unreachable!()
    };
    let set: Vec<(String, String)> = r
        .headers
        .as_ref()
        .unwrap()
        .set_headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .map(|h| {
            (
                h.key.clone(),
                String::from_utf8(h.raw_value.clone()).unwrap(),
            )
        })
        .collect();
    let value = |k: &str| set.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert!(value("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(value("x-ratelimit-limit-requests"), Some("2"));
    assert_eq!(value("x-ratelimit-remaining-requests"), Some("0"));
    assert!(value("x-ratelimit-reset-requests").is_some());
    assert!(envoy.ended().await, "the stream ends with the refusal");
    // Another tenant is picked.
    let (envoy, answers) = exchange(grpc, "sk-b").await;
    assert!(!destination(&answers[0]).is_empty());
    envoy.close().await;
    picker.stop().await;
}

/// With `--pass-priority` the picker hands the gateway the body with the
/// request's priority as vLLM's `priority` field (negated), the client's
/// own replaced, as `serve` forwards it.
#[tokio::test]
async fn the_picker_hands_on_the_priority_of_the_requests_class() {
    let valkey = Valkey::start();
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let s = store(&valkey, "pr", "test-probe", ttls);
    let hb = WorkerHeartbeat {
        worker_id: "w0".into(),
        url: "http://127.0.0.2:8000".into(),
        load: None,
    };
    s.heartbeat(MODEL, &hb).await.unwrap();
    let mut a = args();
    a.model = Some(MODEL.into());
    a.admission = Box::new(AdmissionArgs {
        objectives: vec!["interactive=10".into()],
        pass_priority: true,
        ..AdmissionArgs::default()
    });
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let picker = Router::start_epp(&valkey.url(), a, grpc, BodyMode::FullDuplexStreamed).await;
    let mut handed = None;
    for _ in 0..100 {
        if tonic::transport::Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .is_ok()
        {
            let mut envoy = Envoy::open(grpc).await;
            let config = modes(
                BodySendMode::FullDuplexStreamed,
                BodySendMode::FullDuplexStreamed,
            );
            let extra = [
                ("content-type", "application/json"),
                ("x-gateway-inference-objective", "interactive"),
            ];
            envoy
                .send(client_request("/v1/completions", &extra, config))
                .await;
            let body = serde_json::to_vec(
                &json!({"model": MODEL, "prompt": "hi", "max_tokens": 4, "priority": 99}),
            )
            .unwrap();
            envoy.send(request_body(&body, true)).await;
            let first = envoy.recv().await;
            assert!(!destination(&first).is_empty(), "{first:?}");
            let mut pieces = Vec::new();
            loop {
                pieces.push(envoy.recv().await);
                if handed_back(&pieces).1 {
                    break;
                }
            }
            handed = Some(handed_back(&pieces).0);
            envoy.close().await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let handed: serde_json::Value =
        serde_json::from_slice(&handed.expect("the picker serves")).unwrap();
    // vLLM serves lower values first: priority 10 is -10.
    assert_eq!(handed["priority"], -10, "{handed}");
    assert_eq!(handed["prompt"], "hi");
    picker.stop().await;
}
