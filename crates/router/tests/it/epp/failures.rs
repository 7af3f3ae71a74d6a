//! Bad requests get the documented errors; with Valkey down the picker
//! falls back and stays ready; a request that never ends is cut off; streams
//! beyond the cap are refused.

use super::*;

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
