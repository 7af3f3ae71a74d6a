//! Routing spans exported over OTLP/HTTP: a router process with
//! `--otlp-endpoint` sends its spans to a collector on loopback (decoded
//! here with OpenTelemetry's own protobuf types), joined to the client's
//! W3C trace, and hands the worker its `upstream` span as parent.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use crate::envoy;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use state::{StateTtls, WorkerHeartbeat};
use support::fake_worker::{FakeWorker, SSE_CHUNKS};
use support::router_process::RouterProcess;
use support::{Valkey, http, store, tokenizer_dir};

const MODEL: &str = "qwen3";

/// A collector: every span of every export it receives.
async fn collector() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(
                |State(spans): State<Arc<Mutex<Vec<Span>>>>, body: Bytes| async move {
                    let export = ExportTraceServiceRequest::decode(body).unwrap();
                    for resource in export.resource_spans {
                        let service = resource
                            .resource
                            .unwrap()
                            .attributes
                            .into_iter()
                            .find(|a| a.key == "service.name")
                            .map(|a| format!("{:?}", a.value));
                        assert!(service.unwrap().contains("prefix-router"));
                        for scope in resource.scope_spans {
                            spans.lock().unwrap().extend(scope.spans);
                        }
                    }
                    ""
                },
            ),
        )
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, spans)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The spans of trace `trace` once all of `names` have arrived.
async fn wait_spans(spans: &Mutex<Vec<Span>>, trace: &str, names: &[&str]) -> Vec<Span> {
    for _ in 0..200 {
        let of_trace: Vec<Span> = spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| hex(&s.trace_id) == trace)
            .cloned()
            .collect();
        if names.iter().all(|n| of_trace.iter().any(|s| s.name == *n)) {
            return of_trace;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("spans {names:?} of trace {trace} not exported");
}

fn named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_spans_join_the_clients_trace_and_reach_the_worker() {
    let valkey = Valkey::start();
    let (endpoint, spans) = collector().await;
    let worker = FakeWorker::start("w0").await;
    for _ in 0..2 * SSE_CHUNKS.len() {
        worker.release.send(()).unwrap();
    }
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let probe = store(&valkey, "pr", "test-probe", ttls);
    let hb = WorkerHeartbeat {
        worker_id: "w0".into(),
        url: worker.url(),
        load: None,
    };
    probe.heartbeat(MODEL, &hb).await.unwrap();
    let tokenizer = tokenizer_dir();
    let router = RouterProcess::start_with(
        &valkey.url(),
        &[
            "--model",
            MODEL,
            "--tokenizer-dir",
            tokenizer.to_str().unwrap(),
            "--otlp-endpoint",
            &endpoint,
        ],
        &[
            ("PREFIX_ROUTER_LOG", "warn"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
        None,
    )
    .await;

    // A client's trace: the router's spans join it.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let resp = http()
        .post(format!("{}/v1/completions", router.base))
        .header("traceparent", format!("00-{trace}-{client_span}-01"))
        .json(&json!({"model": MODEL, "prompt": "Trace me through the router, please.", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let _ = resp.bytes().await;
    let names = ["route", "tokenize", "hash", "valkey", "upstream"];
    let got = wait_spans(&spans, trace, &names).await;
    let route = named(&got, "route");
    assert_eq!(
        hex(&route.parent_span_id),
        client_span,
        "route is the client's child"
    );
    for child in &names[1..] {
        assert_eq!(
            hex(&named(&got, child).parent_span_id),
            hex(&route.span_id),
            "{child} is route's child"
        );
    }
    let upstream = named(&got, "upstream");
    let (parent, _) = worker.shared.trace.lock().unwrap()[0].clone();
    assert_eq!(
        parent.as_deref(),
        Some(format!("00-{trace}-{}-01", hex(&upstream.span_id)).as_str()),
        "the worker's parent is the upstream span"
    );

    // No client trace: a new one, rooted at route, still handed on.
    let resp = http()
        .post(format!("{}/v1/completions", router.base))
        .json(&json!({"model": MODEL, "prompt": "A request of its own.", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let _ = resp.bytes().await;
    let (parent, _) = worker.shared.trace.lock().unwrap()[1].clone();
    let parent = parent.expect("a traceparent is sent");
    let new_trace = parent.split('-').nth(1).unwrap().to_owned();
    assert_ne!(new_trace, trace);
    let got = wait_spans(&spans, &new_trace, &names).await;
    assert!(
        named(&got, "route").parent_span_id.is_empty(),
        "a root span"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_picker_exports_its_routing_spans_too() {
    use envoy::{Envoy, client_request, destination, request_body};

    let valkey = Valkey::start();
    let (endpoint, spans) = collector().await;
    let probe = store(&valkey, "pr", "test-probe", StateTtls::default());
    let hb = WorkerHeartbeat {
        worker_id: "w0".into(),
        url: "http://127.0.0.2:8000".into(),
        load: None,
    };
    probe.heartbeat(MODEL, &hb).await.unwrap();
    let (http_port, grpc_port) = (support::free_port().unwrap(), support::free_port().unwrap());
    let tokenizer = tokenizer_dir();
    let mut child = support::router_command("epp")
        .args(["--listen", &format!("127.0.0.1:{http_port}")])
        .args(["--grpc-listen", &format!("127.0.0.1:{grpc_port}")])
        .args(["--valkey", &valkey.url(), "--model", MODEL])
        .args(["--tokenizer-dir", tokenizer.to_str().unwrap()])
        .args(["--otlp-endpoint", &endpoint])
        .env("PREFIX_ROUTER_INTERNAL_TOKEN", support::TOKEN)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .spawn()
        .unwrap();
    let grpc = format!("127.0.0.1:{grpc_port}").parse().unwrap();
    let mut envoy = None;
    for _ in 0..200 {
        if http()
            .get(format!("http://127.0.0.1:{http_port}/health"))
            .send()
            .await
            .is_ok()
        {
            envoy = Some(Envoy::open(grpc).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut envoy = envoy.expect("the picker came up");
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let client_span = "b7ad6b7169203331";
    let traceparent = format!("00-{trace}-{client_span}-01");
    envoy
        .send(client_request(
            "/v1/completions",
            &[("traceparent", &traceparent)],
            None,
        ))
        .await;
    let body = serde_json::to_vec(&json!({"model": MODEL, "prompt": "Pick me a worker."})).unwrap();
    envoy.send(request_body(&body, true)).await;
    assert_eq!(destination(&envoy.recv().await), ["127.0.0.2:8000"]);
    let got = wait_spans(&spans, trace, &["route", "tokenize", "hash", "valkey"]).await;
    let route = named(&got, "route");
    assert_eq!(hex(&route.parent_span_id), client_span);
    for child in ["tokenize", "hash", "valkey"] {
        assert_eq!(hex(&named(&got, child).parent_span_id), hex(&route.span_id));
    }
    envoy.close().await;
    child.kill().await;
}

#[test]
fn otlp_over_tls_is_refused_with_a_reason() {
    let out = support::router_command("serve")
        .args(["--otlp-endpoint", "https://collector:4318"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected an http:// URL"), "{err}");
}
