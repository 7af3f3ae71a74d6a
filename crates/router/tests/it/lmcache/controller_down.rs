//! A silent or unreachable LMCache controller costs no request.

use super::*;

#[tokio::test]
async fn a_silent_or_unreachable_controller_costs_no_request() {
    let valkey = Valkey::start();
    // A controller that accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            conns.push(s);
        }
    });
    let r = Router::start(&valkey.url(), lm_args(&silent_url, &[])).await;
    let workers = two_workers(&r).await;
    for seed in 0..6 {
        // The controller never answers; a request would wait forever on it
        // without the deadline (50 ms): 10 s is only the test's bound.
        let started = Instant::now();
        assert_eq!(
            complete(&r, &prompt(seed, 600), Duration::from_secs(10)).await,
            200
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    let served: usize = workers
        .iter()
        .map(|w| w.shared.hits.load(Ordering::SeqCst))
        .sum();
    assert_eq!(served, 6, "every request reached a worker");
    let m = metrics_text(&r).await;
    assert!(
        counter(
            &m,
            "prefix_router_lmcache_lookups_total{outcome=\"timeout\"}"
        ) >= 1.0,
        "{m}"
    );
    assert_eq!(counter(&m, "prefix_router_lmcache_up"), 0.0, "{m}");
    r.stop().await;
    hold.abort();

    // Nothing listens at all: the same, as errors (new workers: a new
    // Valkey).
    let valkey = Valkey::start();
    let port = free_port().unwrap();
    let r = Router::start(
        &valkey.url(),
        lm_args(&format!("http://127.0.0.1:{port}"), &[]),
    )
    .await;
    let workers = two_workers(&r).await;
    for seed in 10..14 {
        assert_eq!(
            complete(&r, &prompt(seed, 600), Duration::from_secs(10)).await,
            200
        );
    }
    let served: usize = workers
        .iter()
        .map(|w| w.shared.hits.load(Ordering::SeqCst))
        .sum();
    assert_eq!(served, 4);
    let m = metrics_text(&r).await;
    assert!(
        counter(&m, "prefix_router_lmcache_lookups_total{outcome=\"error\"}") >= 1.0,
        "{m}"
    );
    // Explain says how the lookup went and still ranks both workers.
    let (st, e) = post(
        &r,
        "/admin/explain",
        &json!({"model": M, "prompt": prompt(20, 600)}),
    )
    .await;
    assert_eq!(st, 200, "{e}");
    assert_eq!(e["candidates"].as_array().unwrap().len(), 2, "{e}");
    assert!(e["lmcache"]["lookup"].is_string(), "{e}");
    r.stop().await;
}
