//! Roles: colocated workers routed as before, a role kept until a pushed
//! heartbeat says another.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_model_of_colocated_workers_is_routed_as_before() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let w0 = FakeWorker::start("w0").await;
    let w1 = FakeWorker::start("w1").await;
    join(&r, w0.name(), &w0.url(), None).await;
    join(&r, w1.name(), &w1.url(), Some("both")).await;
    let (_, listed) = get(&r, &format!("/admin/workers?model={M}")).await;
    for w in listed["workers"].as_array().unwrap() {
        assert_eq!(w["role"], "both", "{w}");
    }
    let body = json!({"model": M, "prompt": text("plain", 20), "max_tokens": 7});
    let (_, e) = post(&r, "/admin/explain", &body).await;
    assert!(e.get("disaggregation").is_none(), "{e}");
    for _ in 0..3 {
        let a = complete(&r, "/v1/completions", &body).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(a.prefill, None);
        let answer: Value = serde_json::from_str(&a.text).unwrap();
        assert_eq!(answer["echo"], body, "forwarded as sent");
    }
    assert_eq!(w0.hits() + w1.hits(), 3);

    // A role outside the three is refused, naming the valid ones.
    let hb = json!({"worker_id": "w2", "url": w0.url(), "model": M, "role": "prefil"});
    let (st, v) = post(&r, "/internal/heartbeat", &hb).await;
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("prefill, decode or both"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_stays_until_a_pushed_heartbeat_says_another() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let role = |listed: &Value| listed["workers"][0]["role"].as_str().unwrap().to_owned();
    join(&r, "w", "http://127.0.0.1:9", Some("decode")).await;
    assert_eq!(
        role(&get(&r, &format!("/admin/workers?model={M}")).await.1),
        "decode"
    );
    // A static worker's heartbeat names no role: the pushed one stays.
    let hb = state::WorkerHeartbeat {
        worker_id: "w".into(),
        url: "http://127.0.0.1:9".into(),
        load: None,
    };
    let ttls = state::StateTtls {
        worker_lease: Duration::from_secs(120),
        ..state::StateTtls::default()
    };
    support::store(&valkey, "pr", "test-static", ttls)
        .heartbeat(M, &hb)
        .await
        .unwrap();
    assert_eq!(
        role(&get(&r, &format!("/admin/workers?model={M}")).await.1),
        "decode"
    );
    // A pushed heartbeat without one says both.
    join(&r, "w", "http://127.0.0.1:9", None).await;
    assert_eq!(
        role(&get(&r, &format!("/admin/workers?model={M}")).await.1),
        "both"
    );
}
