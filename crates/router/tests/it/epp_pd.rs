//! `prefix-router epp` for a disaggregated model, as llm-d's P/D runs under
//! the Gateway API Inference Extension: over real gRPC and a real
//! valkey-server, the picker sends the request to a decode endpoint and
//! names the prefill endpoint in `x-prefiller-host-port` for the decode
//! pod's sidecar, claims and counts both, and names none when the decode
//! worker holds the prompt beyond the skip share.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use crate::envoy;

use std::net::SocketAddr;
use std::time::Duration;

use envoy::{
    Envoy, destination, exchange_duplex, handed_back, header_set, response_body, response_headers,
};
use prefix_router::BodyMode;
use prefix_router::ext_proc::processing_response::Response;
use serde_json::json;
use support::counts::{wait_counts, worker_counts};
use support::{Router, Valkey, args, free_port, metrics_text, post, tokenizer_dir, worker_blocks};

const MODEL: &str = "qwen3";
const PREFILLER: &str = "x-prefiller-host-port";

/// The workers: one prefill and two decode endpoints (nothing listens
/// there: the gateway, not the picker, sends the requests).
const WORKERS: [(&str, &str, &str); 3] = [
    ("p0", "127.0.0.2:8000", "prefill"),
    ("d0", "127.0.0.3:8000", "decode"),
    ("d1", "127.0.0.4:8000", "decode"),
];

/// A picker with the three workers registered, with their roles if
/// `roles` (else all colocated).
async fn picker(valkey: &Valkey, roles: bool) -> (Router, SocketAddr) {
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(600));
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let r = Router::start_epp(&valkey.url(), a, grpc, BodyMode::FullDuplexStreamed).await;
    for (id, endpoint, role) in WORKERS {
        let mut hb = json!({"worker_id": id, "url": format!("http://{endpoint}"), "model": MODEL});
        if roles {
            hb["role"] = role.into();
        }
        let (st, v) = post(&r, "/internal/heartbeat", &hb).await;
        assert_eq!(st, 200, "{v}");
    }
    (r, grpc)
}

fn worker_at(endpoint: &str) -> &'static str {
    WORKERS.iter().find(|w| w.1 == endpoint).unwrap().0
}

fn completion(prompt: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 4})).unwrap()
}

/// Answers the request's response as Envoy would forward it: headers,
/// then one chunk (the first byte), then the end.
async fn respond(envoy: &mut Envoy, r: &Router, decode: &str, prefill: Option<&str>) {
    envoy.send(response_headers("200", None)).await;
    assert!(matches!(
        envoy.recv().await.response,
        Some(Response::ResponseHeaders(_))
    ));
    // The decode worker's first byte: the sidecar had the prefill's answer
    // before it sent the decode request, so the prefill's part is over.
    envoy.send(response_body(b"data: {}\n\n", false)).await;
    handed_back(&[envoy.recv().await]);
    wait_counts(r, MODEL, decode, |c| c == (1, 0), "decoding").await;
    if let Some(p) = prefill {
        wait_counts(r, MODEL, p, |c| c == (0, 0), "prefill over").await;
    }
    envoy.send(response_body(b"data: [DONE]\n\n", true)).await;
    handed_back(&[envoy.recv().await]);
    wait_counts(r, MODEL, decode, |c| c == (0, 0), "answer over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_decode_endpoint_is_the_destination_and_the_prefill_one_a_header() {
    let valkey = Valkey::start();
    let (r, grpc) = picker(&valkey, true).await;
    let doc: String = (0..40)
        .map(|i| format!("Paragraph {i} of the turbine manual explains one more detail. "))
        .collect();

    // A new prompt: a decode endpoint, the prefill endpoint named for its
    // sidecar; the prefill worker counts the prompt as its prefill, the
    // decode worker none (it receives the KV); both are claimed it.
    let mut envoy = Envoy::open(grpc).await;
    let answer = exchange_duplex(&mut envoy, &completion(&doc), true, None).await;
    let chosen = destination(&answer);
    let decode = worker_at(&chosen[0]);
    assert!(decode.starts_with('d'), "{chosen:?}");
    assert!(
        chosen.iter().all(|e| worker_at(e).starts_with('d')),
        "{chosen:?}"
    );
    assert_eq!(
        header_set(&answer, PREFILLER),
        (Some("127.0.0.2:8000".to_owned()), false)
    );
    wait_counts(&r, MODEL, "p0", |(n, t)| n == 1 && t > 300, "prefilling").await;
    wait_counts(&r, MODEL, decode, |c| c == (1, 0), "receiving").await;
    assert!(!worker_blocks(&valkey, "pr", MODEL, "p0").is_empty());
    assert!(!worker_blocks(&valkey, "pr", MODEL, decode).is_empty());
    respond(&mut envoy, &r, decode, Some("p0")).await;
    envoy.close().await;

    // The same document and a question: the decode worker holds most of
    // it; no prefill endpoint is named (a client's own header is removed),
    // and the decode worker counts the rest as its prefill.
    let mut envoy = Envoy::open(grpc).await;
    let next = format!("{doc} Which paragraph is about blades?");
    let answer = exchange_duplex(&mut envoy, &completion(&next), true, None).await;
    assert_eq!(worker_at(&destination(&answer)[0]), decode);
    assert_eq!(header_set(&answer, PREFILLER), (None, true));
    wait_counts(
        &r,
        MODEL,
        decode,
        |(n, t)| n == 1 && t > 0 && t < 64,
        "computing the rest",
    )
    .await;
    assert_eq!(worker_counts(&r, MODEL, "p0").await, (0, 0));
    respond(&mut envoy, &r, decode, None).await;
    envoy.close().await;

    let text = metrics_text(&r).await;
    for path in ["disaggregated", "skip_prefill"] {
        assert!(
            text.contains(&format!(
                "prefix_router_pd_requests_total{{path=\"{path}\"}} 1"
            )),
            "{path}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_colocated_model_names_no_prefill_endpoint() {
    let valkey = Valkey::start();
    let (_r, grpc) = picker(&valkey, false).await;
    let mut envoy = Envoy::open(grpc).await;
    let answer = exchange_duplex(&mut envoy, &completion("a plain request"), true, None).await;
    assert_eq!(destination(&answer).len(), 3, "every worker may serve it");
    assert_eq!(header_set(&answer, PREFILLER), (None, true));
    envoy.close().await;
}
