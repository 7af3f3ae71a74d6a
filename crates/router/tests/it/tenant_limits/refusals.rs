//! Refusals: OpenAI's 429 with tenants kept apart, and configured tenants
//! by header with the priority handed on.

use super::*;

#[tokio::test]
async fn a_refusal_is_openais_429_and_tenants_are_apart() {
    // 2 per minute: one at once (no burst below 25), the next 30 s later.
    let (_valkey, worker, r) = one_router(|a| a.tenant_requests_per_minute = Some(2)).await;
    let ok = send(&r, "sk-1", 4, false).await;
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(
        header(&ok, "x-ratelimit-limit-requests").as_deref(),
        Some("2")
    );
    assert_eq!(
        header(&ok, "x-ratelimit-remaining-requests").as_deref(),
        Some("1")
    );
    assert!(header(&ok, "x-ratelimit-limit-tokens").is_none());
    assert_limited(send(&r, "sk-1", 4, false).await, "requests", &["requests"]).await;
    // Another key is another tenant.
    assert_eq!(send(&r, "sk-2", 4, false).await.status().as_u16(), 200);
    // A refused request never reached the worker.
    assert_eq!(worker.hits(), 2);
    // Explain shows the decision for the client's key, changing nothing.
    let explain = |key: &'static str| {
        http()
            .post(r.url("/admin/explain"))
            .bearer_auth(support::TOKEN)
            .header("x-client-authorization", format!("Bearer {key}"))
            .json(&json!({"model": MODEL, "prompt": "hi", "max_tokens": 4}))
            .send()
    };
    let explained: Value = explain("sk-1").await.unwrap().json().await.unwrap();
    let admission = &explained["admission"];
    assert_eq!(admission["decision"], "limited: requests", "{explained}");
    assert!(admission["tenant"].as_str().unwrap().starts_with("key:"));
    assert_eq!(admission["limits"]["requests_per_minute"], 2);
    let fresh: Value = explain("sk-3").await.unwrap().json().await.unwrap();
    assert_eq!(fresh["admission"]["decision"], "admitted");
    assert_eq!(send(&r, "sk-3", 4, false).await.status().as_u16(), 200);
    let metrics = support::metrics_text(&r).await;
    // (Tests share the process's recorder: only the series are checked.)
    assert!(
        metrics.contains(r#"prefix_router_admission_total{outcome="limited",reason="requests"}"#),
        "{metrics}"
    );
    assert!(
        metrics
            .contains(r#"prefix_router_tenant_requests_total{tenant="other",outcome="admitted"}"#)
    );
    r.stop().await;
}

/// Tenants named in the config file, taken from a header; the class's
/// priority handed to the engine; no Valkey key for a tenant without limits.
#[tokio::test]
async fn configured_tenants_by_header_and_the_priority_handed_on() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("router.toml");
    std::fs::write(
        &file,
        r#"
tenant_header = "x-gateway-inference-fairness-id"
pass_priority = true
[objectives]
interactive = 10
batch = -1
[[tenants]]
name = "team-a"
weight = 2
requests_per_minute = 2
"#,
    )
    .unwrap();
    let valkey = Valkey::start();
    let worker = FakeWorker::start("w0").await;
    worker.register_in(&valkey, MODEL).await;
    let mut a = args();
    a.config = Some(file);
    let r = Router::start(&valkey.url(), a).await;
    let send_as = |tenant: Option<&'static str>, objective: &'static str| {
        let mut req = http()
            .post(r.url("/v1/completions"))
            .header("x-gateway-inference-objective", objective)
            .json(&json!({"model": MODEL, "prompt": "hi", "max_tokens": 2, "priority": 99}));
        if let Some(t) = tenant {
            req = req.header("x-gateway-inference-fairness-id", t);
        }
        req.send()
    };
    let ok = send_as(Some("team-a"), "interactive").await.unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(
        header(&ok, "x-ratelimit-limit-requests").as_deref(),
        Some("2")
    );
    // vLLM serves lower values first: priority 10 is -10; the client's 99
    // is replaced.
    let bodies = worker.shared.bodies.lock().unwrap().clone();
    assert_eq!(bodies.last().unwrap()["priority"], -10);
    assert_limited(
        send_as(Some("team-a"), "batch").await.unwrap(),
        "requests",
        &["requests"],
    )
    .await;
    // Another header value, or none, is a tenant without limits: admitted,
    // and no key is written for it.
    for _ in 0..3 {
        let other = send_as(Some("team-b"), "nope").await.unwrap();
        assert_eq!(other.status().as_u16(), 200);
        assert!(header(&other, "x-ratelimit-limit-requests").is_none());
        assert_eq!(send_as(None, "batch").await.unwrap().status().as_u16(), 200);
    }
    let bodies = worker.shared.bodies.lock().unwrap().clone();
    // An unknown objective is priority 0, a sheddable one stays negative.
    assert_eq!(bodies[bodies.len() - 2]["priority"], 0);
    assert_eq!(bodies[bodies.len() - 1]["priority"], 1);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("pr:tenant:*")
        .query(&mut valkey.conn())
        .unwrap();
    assert!(
        keys.iter().all(|k| k.starts_with("pr:tenant:{team-a}")),
        "{keys:?}"
    );
    let metrics = support::metrics_text(&r).await;
    assert!(
        metrics
            .contains(r#"prefix_router_tenant_requests_total{tenant="team-a",outcome="limited"}"#)
    );
    r.stop().await;
}
