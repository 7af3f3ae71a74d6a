//! The worker push API over real HTTP: the bearer token, and bad input
//! that must get a JSON 4xx and change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use serde_json::{Value, json};
use support::{M, Router, TOKEN, Valkey, args, http, post, raw_state, register};

/// A Valkey and a router with body limit `max_body`, worker "w" registered.
async fn router_with_worker(max_body: usize) -> (Valkey, Router) {
    let v = Valkey::start();
    let mut a = args();
    a.max_body_bytes = Some(max_body);
    let r = Router::start(&v.url(), a).await;
    register(&r, "w").await;
    (v, r)
}

fn error_message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn every_guarded_route_requires_the_exact_bearer_token() {
    let v = Valkey::start();
    let r = Router::start(&v.url(), args()).await;
    let routes = [
        ("POST", "/internal/heartbeat"),
        ("POST", "/internal/stored"),
        ("POST", "/internal/eviction"),
        ("POST", "/internal/sync"),
        ("POST", "/internal/sync/check"),
        ("POST", "/internal/sync/repair"),
        ("DELETE", "/internal/workers/w"),
        ("GET", "/admin/workers"),
        ("POST", "/admin/explain"),
    ];
    for (method, path) in routes {
        for token in [None, Some("wrong"), Some("test-token-"), Some("")] {
            let mut req = http()
                .request(method.parse().unwrap(), r.url(path))
                .body("{}");
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(
                resp.status().as_u16(),
                401,
                "{method} {path} with {token:?}"
            );
            let body: Value = resp.json().await.unwrap();
            assert_eq!(body["error"]["type"], "unauthorized");
        }
    }
    let ok = http()
        .get(r.url("/admin/workers"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    // Public routes need no token.
    for path in ["/health", "/ready", "/metrics"] {
        assert_eq!(
            http()
                .get(r.url(path))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
            200,
            "{path}"
        );
    }
    r.stop().await;
}

#[tokio::test]
async fn bad_input_gets_a_json_4xx_and_changes_nothing() {
    let (v, r) = router_with_worker(1 << 20).await;
    let (st, _) = post(
        &r,
        "/internal/stored",
        &json!({"worker_id": "w", "block_hashes": [1, 2, 3]}),
    )
    .await;
    assert_eq!(st, 200);
    let before = raw_state(&v, "pr", M);
    let hex_ok = "00000000000000ff";
    let cases: Vec<(&str, Value, u16)> = vec![
        (
            "/internal/stored",
            json!({"worker_id": "w", "block_hashes": ["xyz"]}),
            400,
        ),
        (
            "/internal/stored",
            json!({"worker_id": "w", "block_hashes": [hex_ok, "0x00000000000000f"]}),
            400,
        ),
        (
            "/internal/stored",
            json!({"worker_id": "w", "block_hashes": [-1]}),
            400,
        ),
        (
            "/internal/stored",
            json!({"worker_id": "w", "block_hashes": [1.5]}),
            400,
        ),
        (
            "/internal/stored",
            json!({"worker_id": "w", "block_hashes": "1"}),
            400,
        ),
        (
            "/internal/stored",
            json!({"worker_id": 7, "block_hashes": [1]}),
            400,
        ),
        ("/internal/stored", json!({"block_hashes": [1]}), 400),
        (
            "/internal/stored",
            json!({"worker_id": "ghost", "model": M, "block_hashes": [9]}),
            404,
        ),
        (
            "/internal/stored",
            json!({"worker_id": "ghost", "block_hashes": [9]}),
            404,
        ),
        (
            "/internal/stored",
            json!({"worker_id": "w", "model": "bad{model}", "block_hashes": [9]}),
            400,
        ),
        (
            "/internal/stored",
            json!({"worker_id": "a b", "block_hashes": [9]}),
            400,
        ),
        (
            "/internal/eviction",
            json!({"worker_id": "w", "evicted_hashes": [1, "nothex!!nothex!!"]}),
            400,
        ),
        (
            "/internal/eviction",
            json!({"worker_id": "ghost", "model": M, "evicted_hashes": [1]}),
            404,
        ),
        (
            "/internal/eviction",
            json!({"worker_id": "w", "block_hashes": [1]}),
            400,
        ),
        (
            "/internal/sync",
            json!({"worker_id": "ghost", "model": M, "active_hashes": []}),
            404,
        ),
        (
            "/internal/sync",
            json!({"worker_id": "w", "active_hashes": [1], "sync_id": "../etc"}),
            400,
        ),
        (
            "/internal/sync",
            json!({"worker_id": "w", "active_hashes": [1], "last": false}),
            400,
        ),
        (
            "/internal/sync/repair",
            json!({"worker_id": "w", "buckets": ["zz"], "hashes": [1]}),
            400,
        ),
        (
            "/internal/sync/repair",
            json!({"worker_id": "w", "buckets": ["3:00"], "hashes": [1]}),
            400,
        ),
        (
            "/internal/sync/repair",
            json!({"worker_id": "w", "buckets": (0..33).map(|b| format!("{b:02x}")).collect::<Vec<_>>(), "hashes": [1]}),
            400,
        ),
        (
            "/internal/sync/repair",
            json!({"worker_id": "w", "buckets": ["00"], "hashes": [1], "families": [null, null]}),
            400,
        ),
        (
            "/internal/sync/repair",
            json!({"worker_id": "ghost", "model": M, "buckets": ["00"], "hashes": [1]}),
            404,
        ),
        (
            "/internal/sync/repair",
            json!({"worker_id": "w", "buckets": "00", "hashes": [1]}),
            400,
        ),
        (
            "/internal/heartbeat",
            json!({"worker_id": "w", "url": "ftp://x", "model": M}),
            400,
        ),
        (
            "/internal/heartbeat",
            json!({"worker_id": "w", "url": "http://x", "model": M, "load": {"kv_cache_usage_perc": 7.0}}),
            400,
        ),
        (
            "/internal/heartbeat",
            json!({"worker_id": "w", "url": "http://x", "model": M, "load": {"num_requests_waiting": -1}}),
            400,
        ),
        (
            "/internal/heartbeat",
            json!({"worker_id": "new", "url": "http://x"}),
            404,
        ),
    ];
    for (path, body, want) in cases {
        let (st, resp) = post(&r, path, &body).await;
        assert_eq!(st, want, "{path} {body}: {resp}");
        assert!(
            !error_message(&resp).is_empty(),
            "{path} {body}: no JSON error in {resp}"
        );
    }
    // Malformed JSON, deep nesting, and a body over the limit.
    let raw_bodies: Vec<(String, u16)> = vec![
        ("{\"worker_id\": \"w\", \"block_hashes\": [1,".into(), 400),
        ("not json".into(), 400),
        (format!("{}{}", "[".repeat(5000), "]".repeat(5000)), 400),
        (
            format!(
                "{{\"worker_id\":\"w\",\"block_hashes\":[{}1]}}",
                "1,".repeat(600_000)
            ),
            413,
        ),
    ];
    for (body, want) in raw_bodies {
        let resp = http()
            .post(r.url("/internal/stored"))
            .bearer_auth(TOKEN)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), want);
        let v: Value = resp.json().await.unwrap();
        assert!(!error_message(&v).is_empty());
    }
    assert_eq!(
        raw_state(&v, "pr", M),
        before,
        "a rejected request changed the state"
    );
    r.stop().await;
}

#[tokio::test]
async fn a_million_hash_batch_is_refused_whole() {
    let (v, r) = router_with_worker(64 << 20).await;
    let million: Vec<u64> = (1..=1_000_000).collect();
    for (path, field) in [
        ("/internal/stored", "block_hashes"),
        ("/internal/eviction", "evicted_hashes"),
        ("/internal/sync", "active_hashes"),
    ] {
        let (st, body) = post(&r, path, &json!({"worker_id": "w", field: million})).await;
        assert_eq!(st, 413, "{path}: {body}");
        assert_eq!(body["error"]["type"], "too_many_hashes");
    }
    assert!(raw_state(&v, "pr", M).forward.is_empty());
    r.stop().await;
}
