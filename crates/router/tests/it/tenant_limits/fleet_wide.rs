//! Across routers: four routers hold a tenant to its limit in every
//! window; without Valkey each router keeps its share.

use super::*;

/// 4 routers on one Valkey, a tenant limited to 120 per window offered 5
/// times that, spread over the routers: in any window it gets at most the
/// limit plus 5%, and at least 90% of it. The window is 5 s (the limits
/// scale with it), so that the test takes seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_routers_hold_a_tenant_to_its_limit_in_every_window() {
    const LIMIT: usize = 120;
    let window = Duration::from_secs(5);
    let valkey = Valkey::start();
    let worker = FakeWorker::start("w0").await;
    worker.register_in(&valkey, MODEL).await;
    let mut routers = Vec::new();
    for _ in 0..4 {
        routers.push(
            Router::start(
                &valkey.url(),
                limited(|a| {
                    a.tenant_requests_per_minute = Some(LIMIT as u64);
                    a.rate_limit_window = Some(window);
                }),
            )
            .await,
        );
    }
    let urls: Vec<String> = routers.iter().map(|r| r.url("/v1/completions")).collect();
    // 5x the limit for two windows.
    let offered = 5 * LIMIT * 2;
    let gap = window * 2 / offered as u32;
    let client = http();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..offered {
        let at = start + gap * i as u32;
        let (client, url) = (client.clone(), urls[i % 4].clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            let sent = Instant::now();
            let resp = client
                .post(url)
                .bearer_auth("sk-busy")
                .json(&json!({"model": MODEL, "prompt": "hi", "max_tokens": 1}))
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let complete = status == 200
                || [
                    "retry-after",
                    "x-ratelimit-limit-requests",
                    "x-ratelimit-remaining-requests",
                    "x-ratelimit-reset-requests",
                ]
                .iter()
                .all(|h| resp.headers().contains_key(*h));
            (sent.duration_since(start), status, complete)
        }));
    }
    let mut admitted = Vec::new();
    for t in tasks {
        let (at, status, complete) = t.await.unwrap();
        assert!(status == 200 || status == 429, "status {status}");
        assert!(complete, "a 429 without its headers");
        if status == 200 {
            admitted.push(at);
        }
    }
    admitted.sort();
    // Any window: at most the limit + 5%.
    let most = admitted
        .iter()
        .enumerate()
        .map(|(i, a)| {
            admitted[i..]
                .iter()
                .take_while(|b| **b - *a < window)
                .count()
        })
        .max()
        .unwrap();
    assert!(
        most <= LIMIT * 105 / 100,
        "{most} admitted within one window"
    );
    // Each window offered throughout: at least 90% of the limit.
    for w in 0..2u32 {
        let (from, to) = (window * w, window * (w + 1));
        let n = admitted.iter().filter(|a| **a >= from && **a < to).count();
        assert!(n >= LIMIT * 90 / 100, "window {w}: {n} admitted");
    }
    for r in routers {
        r.stop().await;
    }
}

/// Valkey away: each router holds a tenant to its share of the limit (the
/// limit over the live routers it last saw), and nothing hangs.
#[tokio::test]
async fn without_valkey_each_router_keeps_its_share() {
    let mut valkey = Valkey::start();
    let worker = FakeWorker::start("w0").await;
    let static_worker = |mut a: ServeArgs| {
        a.model = Some(MODEL.into());
        // The routing deadline bounds every Valkey call of a request.
        a.valkey_timeout = Some(Duration::from_millis(200));
        a.workers = vec![format!("w0={}", worker.url()).parse().unwrap()];
        a
    };
    let a = Router::start(
        &valkey.url(),
        static_worker(limited(|a| a.tenant_requests_per_minute = Some(100))),
    )
    .await;
    let b = Router::start(
        &valkey.url(),
        static_worker(limited(|a| a.tenant_requests_per_minute = Some(100))),
    )
    .await;
    // Both routers lease the model (their lease loops run every second).
    let seen = async {
        for _ in 0..100 {
            let routers: usize = redis::cmd("ZCARD")
                .arg("pr:{m}:routers")
                .query(&mut valkey.conn())
                .unwrap_or(0);
            if routers == 2 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(seen.await, "both routers leased the model");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let full = send(&a, "sk-a", 1, false).await;
    assert_eq!(
        header(&full, "x-ratelimit-limit-requests").as_deref(),
        Some("100")
    );
    valkey.kill();
    let started = Instant::now();
    let degraded = send(&a, "sk-a", 1, false).await;
    assert_eq!(
        degraded.status().as_u16(),
        200,
        "routed to the worker it knows"
    );
    // Half of the limit: two routers were live.
    assert_eq!(
        header(&degraded, "x-ratelimit-limit-requests").as_deref(),
        Some("50")
    );
    // Its share's burst (1 + 1 at once) then refusals, all answered at once.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(send(&a, "sk-a", 1, false).await.status().as_u16());
    }
    assert!(
        statuses.contains(&429),
        "{statuses:?} in {:?}",
        started.elapsed()
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "nothing hangs");
    a.stop().await;
    b.stop().await;
}
