//! A waiting request: routed when the worker frees, a 503 past the timeout,
//! never sent when its client is gone.

use super::*;

#[tokio::test]
async fn a_waiting_request_is_routed_when_the_worker_frees() {
    let (_v, router, w) = fleet(Duration::from_secs(5)).await;
    let url = router.url("/v1/completions");
    let first = occupy(&url);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let second = http().post(&url).json(&body("two")).send().await.unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(first.await.unwrap(), 200);
    // It waited for the first to finish: it was never on the worker at
    // the same time.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(w.shared.bodies.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_wait_past_the_timeout_is_a_503_and_a_gone_client_is_never_sent() {
    let (_v, router, w) = fleet(Duration::from_millis(300)).await;
    let url = router.url("/v1/completions");
    let first = occupy(&url);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let resp = http().post(&url).json(&body("two")).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["type"], "queue_timeout", "{err}");
    // A client that gives up while its request waits.
    let gone = http()
        .post(&url)
        .timeout(Duration::from_millis(100))
        .json(&body("three"))
        .send()
        .await;
    assert!(gone.is_err());
    assert_eq!(first.await.unwrap(), 200);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let prompts: Vec<Value> = w
        .shared
        .bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| b["prompt"].clone())
        .collect();
    assert_eq!(prompts, [json!("one")], "only the first reached the worker");
    // The third left when its client went away, not by its timeout.
    let metrics = support::metrics_text(&router).await;
    // What the dashboard's flow control panels read (tests/dashboards.rs).
    for name in [
        "prefix_router_flow_waiting",
        "prefix_router_flow_queued_total",
        "prefix_router_flow_fleet_waiting",
        "prefix_router_flow_saturated",
        "prefix_router_flow_wait_seconds",
        "prefix_router_flow_admitted_total",
        "prefix_router_flow_shed_total",
    ] {
        assert!(metrics.lines().any(|l| l.starts_with(name)), "no {name}");
    }
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("prefix_router_flow_shed_total")
                && l.contains("reason=\"client_gone\"")),
        "{metrics}"
    );
    // By tenant: no tenant is configured here, so every one is `other`.
    for name in [
        "prefix_router_flow_shed_total",
        "prefix_router_flow_queued_total",
        "prefix_router_flow_wait_seconds_count",
    ] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(name) && l.contains("tenant=\"other\"")),
            "no {name} by tenant: {metrics}"
        );
    }
}
