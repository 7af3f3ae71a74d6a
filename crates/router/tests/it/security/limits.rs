//! Bad input: bodies over the limit, JSON nested too deep, prompts over
//! the token limit and malformed requests get a JSON 4xx, before any state is
//! written.

use super::*;

#[tokio::test]
async fn bodies_over_the_limit_are_a_json_413() {
    let (_v, r, workers) = fleet(1, |a| a.max_body_bytes = Some(64 << 10)).await;
    let big = json!({"model": QWEN, "prompt": "x".repeat(70 << 10)}).to_string();
    for path in [
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/embeddings",
        "/admin/explain",
        "/internal/stored",
    ] {
        // With a Content-Length, and chunked (no length known up front).
        let (st, body) = send("POST", &r.url(path), Some(TOKEN), Some(&big)).await;
        assert_eq!(st, 413, "{path}");
        let v = assert_json_error(st, &body, path);
        assert_eq!(v["error"]["type"], "body_too_large");
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big
            .as_bytes()
            .chunks(8192)
            .map(|c| Ok(c.to_vec()))
            .collect();
        let resp = http()
            .post(r.url(path))
            .bearer_auth(TOKEN)
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )))
            .send()
            .await
            .unwrap();
        let st = resp.status().as_u16();
        assert_eq!(st, 413, "{path} chunked");
        assert_json_error(st, &resp.bytes().await.unwrap(), path);
    }
    assert_eq!(workers[0].hits(), 0);
    r.stop().await;
}

#[tokio::test]
async fn json_nested_too_deep_is_a_json_400_without_harm() {
    let (v, r, workers) = fleet(1, |_| {}).await;
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let bomb = deep(100_000);
    for path in [
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/embeddings",
        "/admin/explain",
        "/internal/heartbeat",
        "/internal/stored",
        "/internal/eviction",
        "/internal/sync",
    ] {
        let (st, body) = send("POST", &r.url(path), Some(TOKEN), Some(&bomb)).await;
        assert_eq!(st, 400, "{path}");
        let v = assert_json_error(st, &body, path);
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("nested deeper than 64"), "{path}: {msg}");
    }
    // Deep inside an otherwise valid request: 65 levels refused, 60 routed.
    let with_extra = |n: usize| {
        format!(
            "{{\"model\":\"{QWEN}\",\"prompt\":\"hi\",\"extra\":{}}}",
            deep(n)
        )
    };
    let (st, body) = send(
        "POST",
        &r.url("/v1/completions"),
        None,
        Some(&with_extra(64)),
    )
    .await;
    assert_eq!(st, 400);
    assert_json_error(st, &body, "65 levels");
    let (st, _) = send(
        "POST",
        &r.url("/v1/completions"),
        None,
        Some(&with_extra(59)),
    )
    .await;
    assert_eq!(st, 200);
    // Brackets inside strings are text, however many.
    let text = json!({"model": QWEN, "prompt": "[".repeat(5000)}).to_string();
    let (st, _) = send("POST", &r.url("/v1/completions"), None, Some(&text)).await;
    assert_eq!(st, 200);
    assert_eq!(workers[0].hits(), 2);
    assert!(r.is_running());
    assert_eq!(send("GET", &r.url("/health"), None, None).await.0, 200);
    drop(v);
    r.stop().await;
}

#[tokio::test]
async fn prompts_over_the_token_limit_are_a_413_before_any_state_is_written() {
    let (v, r, workers) = fleet(2, |a| a.exposure.max_prompt_tokens = Some(100)).await;
    let long_text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let many_ids: Vec<u32> = (1..=101).collect();
    let over: Vec<(&str, Value)> = vec![
        (
            "/v1/completions",
            json!({"model": QWEN, "prompt": long_text}),
        ),
        (
            "/v1/completions",
            json!({"model": QWEN, "prompt": many_ids}),
        ),
        (
            "/v1/completions",
            json!({"model": QWEN, "prompt": [many_ids.clone()]}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": QWEN, "messages": [{"role": "user", "content": long_text}]}),
        ),
        (
            "/admin/explain",
            json!({"model": QWEN, "prompt": long_text}),
        ),
        // No tokenizer for this model: token ids are still counted.
        (
            "/v1/completions",
            json!({"model": "other", "prompt": many_ids}),
        ),
    ];
    for (path, body) in &over {
        let (st, resp) = send("POST", &r.url(path), Some(TOKEN), Some(&body.to_string())).await;
        assert_eq!(st, 413, "{path} {body}");
        let v = assert_json_error(st, &resp, path);
        assert_eq!(v["error"]["type"], "prompt_too_long");
    }
    assert_eq!(workers.iter().map(FakeWorker::hits).sum::<usize>(), 0);
    let st = raw_state(&v, "pr", QWEN);
    assert!(st.forward.is_empty() && st.reverse.is_empty(), "{st:?}");
    // At the limit: routed.
    let at: Vec<u32> = (1..=100).collect();
    let (code, _) = send(
        "POST",
        &r.url("/v1/completions"),
        None,
        Some(&json!({"model": QWEN, "prompt": at}).to_string()),
    )
    .await;
    assert_eq!(code, 200);
    r.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_a_json_4xx() {
    let (_v, r, _workers) = fleet(1, |_| {}).await;
    let cases: Vec<(&str, &str, Option<&str>, u16)> = vec![
        ("POST", "/v1/completions", Some("not json"), 400),
        ("POST", "/v1/completions", Some(""), 400),
        ("POST", "/v1/completions", Some("{}"), 400),
        ("POST", "/v1/completions", Some(r#"{"model": 7}"#), 400),
        ("POST", "/v1/completions", Some(r#"{"model": "a b"}"#), 400),
        (
            "POST",
            "/v1/completions",
            Some(r#"{"model": "qwen3", "prompt": {}}"#),
            400,
        ),
        (
            "POST",
            "/v1/completions",
            Some(r#"{"model": "qwen3", "prompt": [-1]}"#),
            400,
        ),
        (
            "POST",
            "/v1/completions",
            Some(r#"{"model": "nobody-serves", "prompt": "x"}"#),
            404,
        ),
        (
            "POST",
            "/v1/chat/completions",
            Some(r#"{"model": "qwen3", "messages": 5}"#),
            400,
        ),
        (
            "POST",
            "/v1/chat/completions",
            Some("\u{0}\u{1}\u{ff}"),
            400,
        ),
        ("GET", "/v1/completions", None, 405),
        ("DELETE", "/v1/chat/completions", None, 405),
        ("GET", "/nowhere", None, 404),
        ("POST", "/v2/completions", Some("{}"), 404),
        ("GET", "/admin/workers?model=bad%7Bmodel%7D", None, 400),
        ("GET", "/admin/workers?model=a&model=b", None, 400),
        ("DELETE", "/internal/workers/%ff", None, 400),
        (
            "POST",
            "/internal/heartbeat",
            Some(r#"{"worker_id": []}"#),
            400,
        ),
    ];
    for (method, path, body, want) in cases {
        let (st, resp) = send(method, &r.url(path), Some(TOKEN), body).await;
        let what = format!("{method} {path} {body:?}");
        assert_eq!(st, want, "{what}: {resp:?}");
        assert_json_error(st, &resp, &what);
    }
    // Invalid UTF-8 in a JSON string.
    let mut bad = br#"{"model": "qwen3", "prompt": ""#.to_vec();
    bad.extend([0xff, 0xfe]);
    bad.extend(br#""}"#);
    let resp = http()
        .post(r.url("/v1/completions"))
        .body(bad)
        .send()
        .await
        .unwrap();
    let st = resp.status().as_u16();
    assert_eq!(st, 400);
    assert_json_error(st, &resp.bytes().await.unwrap(), "invalid utf-8");
    r.stop().await;
}
