//! `prefix-router epp`: two endpoint pickers sharing a real valkey-server,
//! driven over real gRPC message by message as Envoy's ext_proc filter
//! does (no Envoy binary is obtainable here), with the real tokenizer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::envoy;
use crate::epp_fleet as fleet;
use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use envoy::{
    Envoy, common, destination, handed_back, immediate, modes, request_body, request_headers,
    response_body, response_headers, subset,
};
use fleet::{
    MODEL, completion, document, fleet, fleet_tuned, fleet_with, health, pick_duplex,
    wait_in_flight, wait_prefill, worker_of,
};
use prefix_router::BodyMode;
use prefix_router::ext_proc::processing_request::Request;
use prefix_router::ext_proc::processing_response::Response;
use prefix_router::ext_proc::{BodySendMode, HttpTrailers, ProcessingRequest};
use serde_json::json;
use tonic_health::pb::health_check_response::ServingStatus;

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
    let mut envoy = envoy::open_buffered(f.pickers[1].1).await;
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
    let f = fleet_tuned(
        1,
        BodyMode::FullDuplexStreamed,
        |_| {},
        |epp| epp.max_streams = Some(2),
    )
    .await;
    let grpc = f.pickers[0].1;
    let held = [Envoy::open(grpc).await, Envoy::open(grpc).await];
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let refused = envoy::process(channel, rx)
        .await
        .expect_err("a third stream is refused");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(
        refused.message().contains("--epp-max-streams"),
        "{refused:?}"
    );
    // A closed stream frees its place.
    for envoy in held {
        envoy.close().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut envoy = Envoy::open(grpc).await;
    let chosen = pick_duplex(&mut envoy, &completion("room again"), true, None).await;
    assert!(f.endpoints.contains(&chosen[0]));
}
