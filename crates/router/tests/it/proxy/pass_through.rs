//! What passes through unchanged: streams chunk by chunk, statuses,
//! bodies and other routes, the W3C trace context; a client that goes away
//! cancels upstream; bad requests get JSON errors.

use super::*;

#[tokio::test]
async fn streams_pass_through_chunk_by_chunk_unchanged() {
    let f = fleet(1).await;
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": "hi", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.bytes_stream();
    let mut got = Vec::new();
    for chunk in SSE_CHUNKS {
        // The worker sends a chunk only when released: a buffering proxy
        // would never deliver the first one and the timeout would fail.
        f.workers[0].release.send(()).unwrap();
        let mut piece = Vec::new();
        while piece.len() < chunk.len() {
            let next = tokio::time::timeout(Duration::from_secs(10), body.next()).await;
            piece.extend_from_slice(&next.expect("chunk not flushed").unwrap().unwrap());
        }
        got.push(String::from_utf8(piece).unwrap());
    }
    assert_eq!(got, SSE_CHUNKS);
    drop(body);
    assert!(wait_no_in_flight(&f.store).await);
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_upstream_request() {
    let f = fleet(1).await;
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": "hi", "stream": true, "endless": true}))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    f.workers[0].release.send(()).unwrap();
    body.next().await.unwrap().unwrap();
    drop(body); // the client disconnects mid-stream
    f.workers[0].release.send(()).unwrap();
    f.workers[0].release.send(()).unwrap();
    let mut cancelled = false;
    for _ in 0..100 {
        if f.workers[0].shared.stream_cancelled.load(Ordering::SeqCst) {
            cancelled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cancelled, "the worker kept streaming to a client that left");
    assert!(
        wait_no_in_flight(&f.store).await,
        "in-flight count leaked on client abort"
    );
}

#[tokio::test]
async fn statuses_and_bodies_pass_through_and_other_routes_are_forwarded() {
    let f = fleet(1).await;
    *f.workers[0].shared.status.lock().unwrap() = Some(axum::http::StatusCode::IM_A_TEAPOT);
    let (st, _, body) = complete(&f, json!({"model": MODEL, "prompt": "x"})).await;
    assert_eq!(st, 418);
    assert_eq!(body["worker"], "w0");
    *f.workers[0].shared.status.lock().unwrap() = None;
    let resp = http()
        .post(f.router.url("/v1/embeddings?x=1"))
        .json(&json!({"model": MODEL, "input": "abc"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["path"], "/v1/embeddings");
    assert!(wait_no_in_flight(&f.store).await);
    let models: Value = http()
        .get(f.router.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);
}

#[tokio::test]
async fn the_w3c_trace_context_reaches_the_worker_unchanged() {
    let f = fleet(2).await;
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let state = "vendor=abc,other=xyz";
    // A fake worker streams a chunk per release.
    for w in &f.workers {
        for _ in SSE_CHUNKS {
            w.release.send(()).unwrap();
        }
    }
    for stream in [false, true] {
        let resp = http()
            .post(f.router.url("/v1/completions"))
            .header("traceparent", parent)
            .header("tracestate", state)
            .json(&json!({"model": MODEL, "prompt": long_prompt("trace"), "max_tokens": 2, "stream": stream}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let _ = resp.bytes().await;
    }
    let seen: Vec<_> = f
        .workers
        .iter()
        .flat_map(|w| w.shared.trace.lock().unwrap().clone())
        .collect();
    assert_eq!(seen.len(), 2);
    for (p, s) in seen {
        assert_eq!(p.as_deref(), Some(parent));
        assert_eq!(s.as_deref(), Some(state));
    }
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let f = fleet(1).await;
    for (body, want) in [
        (json!({"prompt": "no model"}), 400),
        (json!({"model": MODEL, "prompt": [-1]}), 400),
        (json!({"model": MODEL}), 400),
        (json!({"model": "nobody-serves-this", "prompt": "x"}), 404),
    ] {
        let (st, _, resp) = complete(&f, body.clone()).await;
        assert_eq!(st, want, "{body}: {resp}");
        assert!(
            resp["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{resp}"
        );
    }
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    assert_eq!(f.workers[0].hits(), 0, "a bad request reached a worker");
}
