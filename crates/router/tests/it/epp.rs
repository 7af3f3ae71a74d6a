//! `prefix-router epp`: two endpoint pickers sharing a real valkey-server,
//! driven over real gRPC message by message as Envoy's ext_proc filter
//! does (no Envoy binary is obtainable here), with the real tokenizer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use crate::envoy;

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use envoy::{
    Envoy, common, destination, exchange_duplex, handed_back, immediate, modes, request_body,
    request_headers, response_body, response_headers, subset,
};
use envoy_types::pb::envoy::config::core::v3::Metadata;
use envoy_types::pb::envoy::extensions::filters::http::ext_proc::v3::processing_mode::BodySendMode;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
use envoy_types::pb::envoy::service::ext_proc::v3::{HttpTrailers, ProcessingRequest};
use prefix_router::{BodyMode, ServeArgs};
use serde_json::json;
use state::{StateStore, StateTtls, WorkerHeartbeat};
use support::{Router, Valkey, args, free_port, get, store, tokenizer_dir};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const MODEL: &str = "qwen3";

/// Two pickers on one Valkey, and three registered workers (nothing
/// listens at their addresses: the picker never connects to them).
struct Fleet {
    valkey: Valkey,
    pickers: Vec<(Router, SocketAddr)>,
    store: StateStore,
    endpoints: Vec<String>,
}

async fn fleet(body_mode: BodyMode) -> Fleet {
    fleet_with(body_mode, |_| {}).await
}

async fn fleet_with(body_mode: BodyMode, tune: impl Fn(&mut ServeArgs)) -> Fleet {
    let valkey = Valkey::start();
    // The workers first: the pickers' start (two tokenizers loaded) is the
    // heavy part, on 2 shared cores.
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let store = store(&valkey, "pr", "test-probe", ttls);
    let mut endpoints = Vec::new();
    for i in 0..3 {
        let endpoint = format!("127.0.0.{}:8000", i + 2);
        let hb = WorkerHeartbeat {
            worker_id: format!("w{i}"),
            url: format!("http://{endpoint}"),
            load: None,
        };
        store.heartbeat(MODEL, &hb).await.unwrap();
        endpoints.push(endpoint);
    }
    let mut pickers = Vec::new();
    for _ in 0..2 {
        let mut a = args();
        a.model = Some(MODEL.into());
        a.tokenizer_dir = Some(tokenizer_dir());
        // Locality only: these tests are about pickers agreeing, not about
        // spreading load.
        a.epsilon = Some(100.0);
        a.queue_cost_tokens = Some(0.0);
        tune(&mut a);
        let grpc: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
            .parse()
            .unwrap();
        let router = Router::start_epp(&valkey.url(), a, grpc, body_mode).await;
        pickers.push((router, grpc));
    }
    for (_, grpc) in &pickers {
        wait_serving(*grpc).await;
    }
    Fleet {
        valkey,
        pickers,
        store,
        endpoints,
    }
}

async fn wait_serving(grpc: SocketAddr) {
    for _ in 0..600 {
        if health(grpc, "readiness").await == Some(ServingStatus::Serving) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("picker on {grpc} never ready");
}

async fn health(grpc: SocketAddr, service: &str) -> Option<ServingStatus> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .ok()?
        .connect()
        .await
        .ok()?;
    let mut client = HealthClient::new(channel);
    let answer = client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .ok()?;
    ServingStatus::try_from(answer.into_inner().status).ok()
}

fn document(topic: &str) -> String {
    (0..40)
        .map(|i| format!("Paragraph {i} of the {topic} manual explains one more detail. "))
        .collect()
}

fn completion(prompt: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 4})).unwrap()
}

/// The destination of a full-duplex exchange of one request up to the pick
/// (`envoy::exchange_duplex`).
async fn pick_duplex(
    envoy: &mut Envoy,
    body: &[u8],
    config: bool,
    metadata: Option<Metadata>,
) -> Vec<String> {
    destination(&exchange_duplex(envoy, body, config, metadata).await)
}

async fn in_flight(f: &Fleet) -> HashMap<String, u64> {
    let (st, body) = get(&f.pickers[0].0, "/admin/workers").await;
    assert_eq!(st, 200, "{body}");
    body["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["worker_id"].as_str().unwrap().to_owned(),
                w["in_flight"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The prefill tokens counted on worker `id` (requests before their first
/// response byte), polled until `done` holds (or failing after 5 s).
async fn wait_prefill(f: &Fleet, id: &str, done: impl Fn(u64) -> bool) -> u64 {
    let mut last = 0;
    for _ in 0..100 {
        let (_, body) = get(&f.pickers[0].0, "/admin/workers").await;
        last = body["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["worker_id"] == id)
            .map_or(0, |w| w["prefill_tokens"].as_u64().unwrap());
        if done(last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("prefill tokens of {id}: {last}");
}

/// Waits until the in-flight counts are `expected` (decrements are sent
/// off the stream's task).
async fn wait_in_flight(f: &Fleet, expected: &[(&str, u64)]) {
    let want: HashMap<String, u64> = expected
        .iter()
        .map(|(w, n)| ((*w).to_owned(), *n))
        .collect();
    let mut last = HashMap::new();
    for _ in 0..100 {
        last = in_flight(f).await;
        if want
            .iter()
            .all(|(w, n)| last.get(w).copied().unwrap_or(0) == *n)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("in flight {last:?}, expected {want:?}");
}

fn worker_of(f: &Fleet, endpoint: &str) -> String {
    let i = f.endpoints.iter().position(|e| e == endpoint).unwrap();
    format!("w{i}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_prefix_gets_the_same_endpoint_from_either_picker() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let doc = document("first");
    let mut first = Envoy::open(f.pickers[0].1).await;
    let a = pick_duplex(
        &mut first,
        &completion(&format!("{doc} Question one?")),
        true,
        None,
    )
    .await;
    assert_eq!(a.len(), 3, "the choice and two fallbacks: {a:?}");
    assert_eq!(a.iter().collect::<BTreeSet<_>>().len(), 3);
    assert!(a.iter().all(|e| f.endpoints.contains(e)), "{a:?}");
    // The answer starts: the endpoint's prefill of the document is over.
    first.send(response_headers("200", None)).await;
    first.recv().await;
    first
        .send(response_body(b"data: {\"choices\":[]}\n\n", false))
        .await;
    first.recv().await;
    wait_prefill(&f, &worker_of(&f, &a[0]), |n| n == 0).await;
    // Through the other picker, which was not told the body mode: it
    // assumes full-duplex streamed, as configured.
    let mut second = Envoy::open(f.pickers[1].1).await;
    let b = pick_duplex(
        &mut second,
        &completion(&format!("{doc} Question two?")),
        false,
        None,
    )
    .await;
    assert_eq!(a[0], b[0], "the same prefix goes where it was claimed");
    first.close().await;
    second.close().await;
}

/// Sixteen concurrent requests on one new document, through both pickers,
/// none answered yet: each pick sees the claims and the prefills the
/// earlier ones queued (route.lua serialises them). A follower adds only
/// its question to the document's prefill queued there, far less than a
/// cold endpoint's prefill of the document (weighed 3×), so the herd stays
/// on one endpoint, counted in full: sixteen requests, and their prefill.
/// Nothing stays counted once the streams end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_herd_of_new_prefixes_across_pickers_goes_to_one_endpoint() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let doc = document("herd");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let grpc = f.pickers[i % 2].1;
        let body = completion(&format!("{doc} Concurrent question {i}"));
        tasks.push(tokio::spawn(async move {
            let mut envoy = Envoy::open(grpc).await;
            let chosen = pick_duplex(&mut envoy, &body, true, None).await;
            (chosen[0].clone(), envoy)
        }));
    }
    let mut chosen = BTreeSet::new();
    let mut streams = Vec::new();
    for t in tasks {
        let (endpoint, envoy) = t.await.unwrap();
        chosen.insert(endpoint);
        streams.push(envoy);
    }
    assert_eq!(
        chosen.len(),
        1,
        "16 concurrent requests split over {chosen:?}"
    );
    let worker = worker_of(&f, chosen.first().unwrap());
    wait_in_flight(&f, &[(&worker, 16)]).await;
    assert!(wait_prefill(&f, &worker, |n| n > 0).await > 300);
    for s in streams {
        s.close().await;
    }
    // Envoy ending the streams ends the requests: nothing stays counted.
    wait_in_flight(&f, &[("w0", 0), ("w1", 0), ("w2", 0)]).await;
    assert_eq!(wait_prefill(&f, &worker, |n| n == 0).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buffered_mode_answers_the_headers_then_routes_on_the_body() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let mut envoy = Envoy::open(f.pickers[0].1).await;
    let config = modes(BodySendMode::Buffered, BodySendMode::None);
    envoy
        .send(request_headers("/v1/chat/completions", false, config, None))
        .await;
    let headers = envoy.recv().await;
    let Some(Response::RequestHeaders(h)) = &headers.response else {
        panic!("the headers are answered at once: {headers:?}");
    };
    assert!(
        h.response
            .as_ref()
            .is_none_or(|c| c.header_mutation.is_none())
    );
    let body = serde_json::to_vec(&json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": document("buffered")}],
    }))
    .unwrap();
    envoy.send(request_body(&body, true)).await;
    let answer = envoy.recv().await;
    assert!(matches!(answer.response, Some(Response::RequestBody(_))));
    let chosen = destination(&answer);
    assert!(f.endpoints.contains(&chosen[0]));
    let c = common(&answer).unwrap();
    assert!(
        c.body_mutation.is_none(),
        "a buffered body goes on as it was"
    );
    wait_in_flight(&f, &[(&worker_of(&f, &chosen[0]), 1)]).await;
    // With no response body sent to the picker, the count ends with the stream.
    envoy.send(response_headers("200", None)).await;
    assert!(matches!(
        envoy.recv().await.response,
        Some(Response::ResponseHeaders(_))
    ));
    envoy.close().await;
    wait_in_flight(&f, &[(&worker_of(&f, &chosen[0]), 0)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_response_moves_and_releases_the_count_and_its_usage_is_read() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let mut envoy = Envoy::open(f.pickers[0].1).await;
    let chosen = pick_duplex(&mut envoy, &completion(&document("served")), true, None).await;
    let (first, second) = (worker_of(&f, &chosen[0]), worker_of(&f, &chosen[1]));
    wait_in_flight(&f, &[(&first, 1), (&second, 0)]).await;
    // The first endpoint failed; Envoy's retry reached the second.
    envoy.send(response_headers("200", Some(&chosen[1]))).await;
    assert!(matches!(
        envoy.recv().await.response,
        Some(Response::ResponseHeaders(_))
    ));
    wait_in_flight(&f, &[(&first, 0), (&second, 1)]).await;
    // The prompt's prefill moved with it, and ends with the first byte.
    assert!(wait_prefill(&f, &second, |n| n > 0).await > 300);
    assert_eq!(wait_prefill(&f, &first, |n| n == 0).await, 0);
    let events = [
        "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n".to_owned(),
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":333,\"prompt_tokens_details\":{\"cached_tokens\":320}}}\n\n".to_owned(),
        "data: [DONE]\n\n".to_owned(),
    ];
    for (i, e) in events.iter().enumerate() {
        envoy
            .send(response_body(e.as_bytes(), i == events.len() - 1))
            .await;
        let (piece, ended) = handed_back(&[envoy.recv().await]);
        assert_eq!(piece, e.as_bytes(), "each response chunk is handed back");
        assert_eq!(ended, i == events.len() - 1);
        if i == 0 {
            wait_prefill(&f, &second, |n| n == 0).await;
            wait_in_flight(&f, &[(&second, 1)]).await;
        }
    }
    wait_in_flight(&f, &[(&first, 0), (&second, 0)]).await;
    let metrics = support::metrics_text(&f.pickers[0].0).await;
    assert!(
        metrics.contains(&format!(
            "prefix_router_engine_cached_tokens_total{{model=\"{MODEL}\"}} 320"
        )),
        "{metrics}"
    );
    assert!(metrics.contains(&format!(
        "prefix_router_engine_prompt_tokens_total{{model=\"{MODEL}\"}} 333"
    )));
    assert!(metrics.contains("prefix_router_epp_picks_total{outcome=\"picked\"}"));
    envoy.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_subset_hint_limits_the_choice() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let doc = completion(&document("subset"));
    for only in [&f.endpoints[1], &f.endpoints[2]] {
        let mut envoy = Envoy::open(f.pickers[0].1).await;
        let chosen = pick_duplex(&mut envoy, &doc, true, Some(subset(&[only]))).await;
        assert_eq!(chosen, vec![only.clone()], "only the subset");
        envoy.close().await;
    }
    // A herd of new prefixes within a subset, across both pickers, once
    // each has seen the workers (a picker's very first pick is a lookup
    // and a claim, not atomic): still one endpoint, of the subset.
    let mut envoy = Envoy::open(f.pickers[1].1).await;
    pick_duplex(
        &mut envoy,
        &completion("warm the second picker"),
        true,
        None,
    )
    .await;
    envoy.close().await;
    let pair = [f.endpoints[0].as_str(), f.endpoints[2].as_str()];
    let herd_doc = document("subset herd");
    let mut tasks = Vec::new();
    for i in 0..12 {
        let grpc = f.pickers[i % 2].1;
        let body = completion(&format!("{herd_doc} Question {i}"));
        let hint = subset(&pair);
        tasks.push(tokio::spawn(async move {
            let mut envoy = Envoy::open(grpc).await;
            let chosen = pick_duplex(&mut envoy, &body, true, Some(hint)).await;
            envoy.close().await;
            chosen[0].clone()
        }));
    }
    let mut chosen = BTreeSet::new();
    for t in tasks {
        chosen.insert(t.await.unwrap());
    }
    assert_eq!(
        chosen.len(),
        1,
        "12 concurrent requests split over {chosen:?}"
    );
    assert!(pair.contains(&chosen.first().unwrap().as_str()));
    for endpoints in [vec!["10.9.9.9:8000"], vec![]] {
        let mut envoy = Envoy::open(f.pickers[1].1).await;
        envoy
            .send(request_headers(
                "/v1/completions",
                false,
                None,
                Some(subset(&endpoints)),
            ))
            .await;
        envoy.send(request_body(&doc, true)).await;
        let (status, body) = immediate(&envoy.recv().await);
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["type"], "no_ready_endpoint");
        assert!(envoy.ended().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_get_the_documented_errors() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let grpc = f.pickers[0].1;
    let cases: [(&[u8], i32, &str); 4] = [
        (b"{not json", 400, "invalid_request"),
        (br#"{"model": "qwen3"}"#, 400, "invalid_request"),
        (
            br#"{"model": "nobody-serves-this", "prompt": "hi"}"#,
            503,
            "no_ready_endpoint",
        ),
        (
            br#"{"model": "qwen3", "prompt": 12}"#,
            400,
            "invalid_request",
        ),
    ];
    for (body, want, kind) in cases {
        let mut envoy = Envoy::open(grpc).await;
        envoy
            .send(request_headers("/v1/completions", false, None, None))
            .await;
        envoy.send(request_body(body, true)).await;
        let (status, error) = immediate(&envoy.recv().await);
        assert_eq!(
            (status, error["error"]["type"].as_str()),
            (want, Some(kind)),
            "{error}"
        );
        assert_eq!(error["error"]["code"], want);
        assert!(envoy.ended().await, "an immediate response ends the stream");
    }
    // A body over --max-body-bytes (default 32 MiB) is refused as it comes.
    let mut envoy = Envoy::open(grpc).await;
    envoy
        .send(request_headers("/v1/completions", false, None, None))
        .await;
    let chunk = vec![b' '; 3 << 20];
    let mut refused = None;
    for _ in 0..12 {
        if envoy
            .tx
            .as_ref()
            .unwrap()
            .send(request_body(&chunk, false))
            .await
            .is_err()
        {
            break;
        }
        if let Ok(Ok(Some(answer))) =
            tokio::time::timeout(Duration::from_millis(200), envoy.rx.message()).await
        {
            refused = Some(answer);
            break;
        }
    }
    let (status, error) = immediate(&refused.expect("refused before 36 MiB"));
    assert_eq!(status, 413, "{error}");
    // Streamed (not full duplex) bodies cannot be routed on: the gateway is
    // misconfigured, and says so.
    let mut envoy = Envoy::open(grpc).await;
    let config = modes(BodySendMode::Streamed, BodySendMode::None);
    envoy
        .send(request_headers("/v1/completions", false, config, None))
        .await;
    let (status, error) = immediate(&envoy.recv().await);
    assert_eq!(
        (status, error["error"]["type"].as_str()),
        (500, Some("epp_misconfigured"))
    );
    // A request without a body is routed by load over --model's workers.
    let mut envoy = Envoy::open(grpc).await;
    envoy
        .send(request_headers("/v1/models", true, None, None))
        .await;
    let chosen = destination(&envoy.recv().await);
    assert!(f.endpoints.contains(&chosen[0]), "{chosen:?}");
    envoy.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_valkey_down_the_picker_falls_back_and_stays_ready() {
    let mut f = fleet(BodyMode::FullDuplexStreamed).await;
    let grpc = f.pickers[0].1;
    let body = completion(&document("outage"));
    let mut envoy = Envoy::open(grpc).await;
    let before = pick_duplex(&mut envoy, &body, true, None).await;
    envoy.close().await;
    f.valkey.kill();
    let mut envoy = Envoy::open(grpc).await;
    let during = pick_duplex(&mut envoy, &body, true, None).await;
    assert!(f.endpoints.contains(&during[0]), "{during:?}");
    assert_eq!(
        during.iter().collect::<BTreeSet<_>>(),
        before.iter().collect::<BTreeSet<_>>(),
        "the fallback ranks the workers last seen"
    );
    envoy.close().await;
    let metrics = support::metrics_text(&f.pickers[0].0).await;
    assert!(
        metrics.contains("prefix_router_decisions_total{outcome=\"fallback\"}"),
        "{metrics}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        health(grpc, "readiness").await,
        Some(ServingStatus::Serving)
    );
    assert_eq!(health(grpc, "liveness").await, Some(ServingStatus::Serving));
    assert_eq!(
        health(grpc, "envoy.service.ext_proc.v3.ExternalProcessor").await,
        Some(ServingStatus::Serving)
    );
    let _ = &f.store;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trailers_end_a_body_in_either_mode() {
    let f = fleet(BodyMode::FullDuplexStreamed).await;
    let trailers = || ProcessingRequest {
        request: Some(Request::RequestTrailers(HttpTrailers::default())),
        ..ProcessingRequest::default()
    };
    let body = completion(&document("trailers"));
    // Full duplex: the last chunk does not end the body, the trailers do;
    // the answers come in the order headers, body, trailers.
    let mut envoy = Envoy::open(f.pickers[0].1).await;
    let config = modes(
        BodySendMode::FullDuplexStreamed,
        BodySendMode::FullDuplexStreamed,
    );
    envoy
        .send(request_headers("/v1/completions", false, config, None))
        .await;
    envoy.send(request_body(&body, false)).await;
    envoy.send(trailers()).await;
    let chosen = destination(&envoy.recv().await);
    assert!(f.endpoints.contains(&chosen[0]));
    let mut pieces = Vec::new();
    let last = loop {
        let answer = envoy.recv().await;
        if matches!(answer.response, Some(Response::RequestTrailers(_))) {
            break answer;
        }
        pieces.push(answer);
    };
    assert!(matches!(last.response, Some(Response::RequestTrailers(_))));
    let (handed, ended) = handed_back(&pieces);
    assert_eq!(handed, body);
    assert!(!ended, "the body's end is the trailers'");
    envoy.close().await;
    // Buffered: the whole body comes without its end mark when trailers
    // follow; it is routed, not refused as cut.
    let mut envoy = Envoy::open(f.pickers[1].1).await;
    let config = modes(BodySendMode::Buffered, BodySendMode::None);
    envoy
        .send(request_headers("/v1/completions", false, config, None))
        .await;
    assert!(matches!(
        envoy.recv().await.response,
        Some(Response::RequestHeaders(_))
    ));
    envoy.send(request_body(&body, false)).await;
    let answer = envoy.recv().await;
    assert!(matches!(answer.response, Some(Response::RequestBody(_))));
    assert_eq!(destination(&answer)[0], chosen[0], "the same prefix");
    envoy.send(trailers()).await;
    assert!(matches!(
        envoy.recv().await.response,
        Some(Response::RequestTrailers(_))
    ));
    envoy.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_that_never_ends_is_cut_off() {
    let f = fleet_with(BodyMode::FullDuplexStreamed, |a| {
        a.exposure.client_timeout = Some(Duration::from_secs(1));
    })
    .await;
    let mut envoy = Envoy::open(f.pickers[0].1).await;
    envoy
        .send(request_headers("/v1/completions", false, None, None))
        .await;
    envoy.send(request_body(b"{\"model\": ", false)).await;
    // Then nothing: the picker answers 408 and ends the stream.
    let (status, error) = immediate(&envoy.recv().await);
    assert_eq!(
        (status, error["error"]["type"].as_str()),
        (408, Some("request_timeout"))
    );
    assert!(envoy.ended().await);
    // A picked request is not cut off while its response takes its time.
    let mut envoy = Envoy::open(f.pickers[0].1).await;
    let chosen = pick_duplex(&mut envoy, &completion("a slow answer"), true, None).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    envoy.send(response_headers("200", Some(&chosen[0]))).await;
    assert!(matches!(
        envoy.recv().await.response,
        Some(Response::ResponseHeaders(_))
    ));
    envoy.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streams_beyond_the_cap_are_refused() {
    let f = fleet_with(BodyMode::FullDuplexStreamed, |a| {
        a.exposure.max_connections = Some(2);
    })
    .await;
    let grpc = f.pickers[0].1;
    let held = [Envoy::open(grpc).await, Envoy::open(grpc).await];
    let mut client = ExternalProcessorClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let refused = client
        .process(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect_err("a third stream is refused");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    // A closed stream frees its place.
    for envoy in held {
        envoy.close().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut envoy = Envoy::open(grpc).await;
    let chosen = pick_duplex(&mut envoy, &completion("room again"), true, None).await;
    assert!(f.endpoints.contains(&chosen[0]));
}
