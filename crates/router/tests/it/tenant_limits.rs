//! Tenants' fleet-wide limits end to end (issue 28): real routers sharing a
//! real valkey-server, a fake OpenAI worker over HTTP. Requests, tokens
//! (reserved, corrected by the answer's usage) and requests in flight
//! (released at the answer's end and when the client leaves); refusals as
//! OpenAI's 429; exactness across four routers over a short window; the
//! degraded per-router share while Valkey is away.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use prefix_router::{AdmissionArgs, ServeArgs};
use serde_json::{Value, json};
use support::fake_worker::FakeWorker;
use support::{Router, Valkey, args, http};

const MODEL: &str = "m";

/// `serve` flags with admission set by `tune`.
fn limited(tune: impl FnOnce(&mut AdmissionArgs)) -> ServeArgs {
    let mut a = args();
    let mut adm = AdmissionArgs::default();
    tune(&mut adm);
    a.admission = Box::new(adm);
    a
}

/// One router limited by `tune` in front of one fake worker.
async fn one_router(tune: impl FnOnce(&mut AdmissionArgs)) -> (Valkey, FakeWorker, Router) {
    let valkey = Valkey::start();
    let worker = FakeWorker::start("w0").await;
    worker.register_in(&valkey, MODEL).await;
    let r = Router::start(&valkey.url(), limited(tune)).await;
    (valkey, worker, r)
}

/// A completion of `max_tokens` (streamed when `stream`) as `key`'s tenant.
async fn send(r: &Router, key: &str, max_tokens: u64, stream: bool) -> reqwest::Response {
    http()
        .post(r.url("/v1/completions"))
        .bearer_auth(key)
        .json(&json!({"model": MODEL, "prompt": "hi", "max_tokens": max_tokens, "stream": stream}))
        .send()
        .await
        .unwrap()
}

fn header(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

/// Asserts `resp` is OpenAI's 429 for `reason`, with every header.
async fn assert_limited(resp: reqwest::Response, reason: &str, kinds: &[&str]) {
    assert_eq!(resp.status().as_u16(), 429);
    let retry: u64 = header(&resp, "retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1, "Retry-After {retry}");
    assert_eq!(header(&resp, "x-ratelimit-reason").as_deref(), Some(reason));
    for kind in kinds {
        for h in ["limit", "remaining", "reset"] {
            assert!(
                header(&resp, &format!("x-ratelimit-{h}-{kind}")).is_some(),
                "x-ratelimit-{h}-{kind} missing"
            );
        }
    }
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_exceeded");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant")
    );
}

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

#[tokio::test]
async fn tokens_are_reserved_and_corrected_by_the_answers_usage() {
    // 6000 tokens per minute: 10 ms of arrival time per token. A request
    // of 1000 max_tokens reserves about 1011 (10 s), more than the
    // tolerance, so the next one passes only once the bucket is idle.
    let (_valkey, worker, r) = one_router(|a| a.tenant_tokens_per_minute = Some(6000)).await;
    // The answer used 50 tokens: 961 come back, 0.5 s of arrival time left.
    *worker.shared.usage.lock().unwrap() =
        Some(json!({"prompt_tokens": 10, "completion_tokens": 40, "total_tokens": 50}));
    let first = send(&r, "sk-a", 1000, false).await;
    assert_eq!(first.status().as_u16(), 200);
    let remaining: u64 = header(&first, "x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!((4980..=4995).contains(&remaining), "{remaining}");
    first.bytes().await.unwrap();
    // Still reserved right after: refused.
    assert_limited(send(&r, "sk-a", 1000, false).await, "tokens", &["tokens"]).await;
    tokio::time::sleep(Duration::from_millis(900)).await;
    // Corrected: 0.5 s of arrival time has passed; without the correction
    // 10 s would be left.
    let second = send(&r, "sk-a", 1000, true).await;
    assert_eq!(
        second.status().as_u16(),
        200,
        "the reservation was corrected"
    );
    // Streamed, the usage comes in the last event: corrected too.
    for _ in 0..4 {
        worker.release.send(()).unwrap();
    }
    second.bytes().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    // Now an answer without usage: its reservation stands.
    *worker.shared.usage.lock().unwrap() = None;
    let third = send(&r, "sk-a", 1000, false).await;
    assert_eq!(
        third.status().as_u16(),
        200,
        "the streamed answer was corrected"
    );
    third.bytes().await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_limited(send(&r, "sk-a", 1000, false).await, "tokens", &["tokens"]).await;
    // A request larger than the whole limit can never pass: refused at once.
    let huge = send(&r, "sk-b", 10_000, false).await;
    assert_eq!(huge.status().as_u16(), 429);
    let body: Value = huge.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens")
    );
    r.stop().await;
}

#[tokio::test]
async fn places_in_flight_are_released_at_the_end_and_when_the_client_leaves() {
    let (_valkey, worker, r) = one_router(|a| a.tenant_max_concurrent = Some(1)).await;
    // A stream held open by the worker holds the tenant's one place.
    let held = send(&r, "sk-a", 4, true).await;
    assert_eq!(held.status().as_u16(), 200);
    assert_limited(send(&r, "sk-a", 4, false).await, "concurrency", &[]).await;
    // Another tenant has its own place.
    assert_eq!(send(&r, "sk-b", 4, false).await.status().as_u16(), 200);
    for _ in 0..3 {
        worker.release.send(()).unwrap();
    }
    held.bytes().await.unwrap();
    let admitted_again = async {
        for _ in 0..50 {
            let resp = send(&r, "sk-a", 4, false).await;
            if resp.status().as_u16() == 200 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(
        admitted_again.await,
        "the place came back at the answer's end"
    );
    // A client that leaves mid-stream gives its place back too.
    let endless = http()
        .post(r.url("/v1/completions"))
        .bearer_auth("sk-a")
        .json(&json!({"model": MODEL, "prompt": "hi", "stream": true, "endless": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(endless.status().as_u16(), 200);
    let mut body = endless.bytes_stream();
    body.next().await.unwrap().unwrap();
    assert_limited(send(&r, "sk-a", 4, false).await, "concurrency", &[]).await;
    drop(body);
    for _ in 0..50 {
        if worker.shared.stream_cancelled.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(worker.shared.stream_cancelled.load(Ordering::SeqCst));
    let mut freed = false;
    for _ in 0..50 {
        if send(&r, "sk-a", 4, false).await.status().as_u16() == 200 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "the place came back when the client left");
    r.stop().await;
}

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
