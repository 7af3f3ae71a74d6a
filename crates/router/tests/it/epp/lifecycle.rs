//! A request's messages: buffered mode answers the headers then routes on
//! the body, the response moves and releases the count (its usage read), and
//! trailers end a body in either mode.

use super::*;

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
