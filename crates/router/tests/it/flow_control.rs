//! Flow control end to end: a router over real Valkey and a worker over
//! real HTTP that holds each request, `--max-in-flight-per-worker 1`: a
//! request waits while the worker is busy and is routed when it frees; a
//! wait past `--queue-timeout` is a 503 `queue_timeout` with `Retry-After`;
//! a client that goes away while waiting is never sent to the worker.

use crate::support;

use std::time::Duration;

use prefix_router::{AdmissionArgs, FlowArgs, ServeArgs};
use serde_json::{Value, json};
use state::{BatchLimits, ConnectionSettings, SaturationThresholds, StateStore, StateTtls};
use support::fake_worker::FakeWorker;
use support::{Router, Valkey, http};

const MODEL: &str = "m";

async fn fleet(timeout: Duration) -> (Valkey, Router, FakeWorker) {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let router = Router::start(&valkey.url(), args(timeout, 1024)).await;
    warm(&valkey, &[&router], &w, 700).await;
    (valkey, router, w)
}

/// Sends each router one request and waits until each holds its lease on
/// the model (a router's in-flight counts weigh only under its lease,
/// which a new router takes at its first request), then makes the worker
/// hold each request `delay_ms`; the warm-up requests are forgotten.
async fn warm(valkey: &Valkey, routers: &[&Router], w: &FakeWorker, delay_ms: u64) {
    for r in routers {
        let resp = http()
            .post(r.url("/v1/completions"))
            .json(&body("warm"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let mut c = valkey.conn();
    for _ in 0..100 {
        let n: usize = redis::cmd("ZCARD")
            .arg("pr:{m}:routers")
            .query(&mut c)
            .unwrap();
        if n >= routers.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w.shared.bodies.lock().unwrap().clear();
    *w.shared.answer_delay.lock().unwrap() = Some(Duration::from_millis(delay_ms));
}

/// A worker, registered.
async fn worker(valkey: &Valkey) -> FakeWorker {
    let w = FakeWorker::start("w0").await;
    w.register_in(valkey, MODEL).await;
    w
}

/// One request in flight per worker; objective `high` is priority 10,
/// `batch` -1 (sheddable); no header: 0.
fn args(timeout: Duration, max_queued: usize) -> ServeArgs {
    let mut a = ServeArgs {
        flow: Box::new(FlowArgs {
            max_in_flight_per_worker: Some(1),
            queue_timeout: Some(timeout),
            max_queued: Some(max_queued),
            ..FlowArgs::default()
        }),
        admission: Box::new(AdmissionArgs {
            objectives: vec!["high=10".into(), "batch=-1".into()],
            ..AdmissionArgs::default()
        }),
        ..ServeArgs::default()
    };
    // The fake worker streams chunk by chunk on command: non-streamed
    // requests stay non-streamed to it.
    a.migration.migrate_unstreamed = Some(false);
    a
}

/// Sends `prompt` with `objective` (none: priority 0) to `router`; returns
/// the status and the error type of a refusal.
fn send(
    router: &Router,
    prompt: &str,
    objective: Option<&str>,
) -> tokio::task::JoinHandle<(u16, String)> {
    let mut request = http()
        .post(router.url("/v1/completions"))
        .json(&body(prompt));
    if let Some(o) = objective {
        request = request.header("x-gateway-inference-objective", o);
    }
    tokio::spawn(async move {
        let resp = request.send().await.unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        (status, v["error"]["type"].as_str().unwrap_or("").to_owned())
    })
}

/// The prompts the worker received, in order.
fn received(w: &FakeWorker) -> Vec<String> {
    w.shared
        .bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| b["prompt"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[tokio::test]
async fn high_priority_sent_to_router_a_goes_before_low_priority_waiting_on_router_b() {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let a = Router::start(&valkey.url(), args(Duration::from_secs(20), 1024)).await;
    let b = Router::start(&valkey.url(), args(Duration::from_secs(20), 1024)).await;
    // "one" is held long enough that every request below waits behind it.
    warm(&valkey, &[&a, &b], &w, 1500).await;
    let mut all = vec![send(&b, "one", None)];
    tokio::time::sleep(Duration::from_millis(150)).await;
    for i in 0..3 {
        all.push(send(&b, &format!("low{i}"), None));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..2 {
        all.push(send(&a, &format!("high{i}"), Some("high")));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A sheddable request while saturated: refused at once.
    let (status, kind) = send(&a, "batch", Some("batch")).await.unwrap();
    assert_eq!((status, kind.as_str()), (429, "sheddable_refused"));
    for r in all {
        assert_eq!(r.await.unwrap().0, 200);
    }
    let got = received(&w);
    assert_eq!(got[0], "one");
    let mut highs: Vec<&String> = got[1..3].iter().collect();
    highs.sort();
    assert_eq!(highs, ["high0", "high1"], "worker received {got:?}");
    assert_eq!(
        got[3..],
        ["low0", "low1", "low2"],
        "worker received {got:?}"
    );
}

/// A router whose own view is clean (its last request left the worker a
/// free place) and that holds no waiter itself must still not route past
/// entries waiting on another router: in the 10:1 fairness run the heavy
/// tenant's router sent 48–68 requests "direct" within the second it
/// trusted such a view, while the other routers' entries waited.
#[tokio::test]
async fn a_router_with_an_empty_room_does_not_go_past_entries_waiting_on_another() {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let two_each = || {
        let mut s = args(Duration::from_secs(20), 1024);
        s.flow.max_in_flight_per_worker = Some(2);
        s
    };
    let a = Router::start(&valkey.url(), two_each()).await;
    let b = Router::start(&valkey.url(), two_each()).await;
    warm(&valkey, &[&a, &b], &w, 1500).await;
    // Both routers' views from the warm-up grow stale: the next request of
    // each asks the fleet's room.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // B: "one" leaves the worker a free place, so B trusts for a second
    // that requests may go straight to routing.
    let one = send(&b, "one", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    // A: "two" takes the last place; "three" waits in the fleet's room.
    let two = send(&a, "two", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let three = send(&a, "three", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    // B again, within its second: "four" must wait behind "three".
    let four = send(&b, "four", None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        received(&w),
        ["one", "two"],
        "a request went past the fleet's waiting room"
    );
    for r in [one, two, three, four] {
        assert_eq!(r.await.unwrap().0, 200);
    }
    assert_eq!(received(&w), ["one", "two", "three", "four"]);
}

/// A burst on a router whose view is clean goes straight to routing only
/// as far as the places it saw free; the rest ask the fleet's room (in the
/// 10:1 fairness run, 60 requests of a burst at a phase's start went past
/// the room before any routing reply said the workers were saturated).
#[tokio::test]
async fn a_burst_after_a_clean_view_goes_straight_only_to_the_places_seen_free() {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let mut s = args(Duration::from_secs(20), 1024);
    s.flow.max_in_flight_per_worker = Some(2);
    let r = Router::start(&valkey.url(), s).await;
    warm(&valkey, &[&r], &w, 1500).await;
    // The warm-up's reply is fresh and clean: two places free.
    let burst: Vec<_> = (0..8).map(|i| send(&r, &format!("b{i}"), None)).collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let at_once = received(&w).len();
    assert!(
        at_once <= 3,
        "{at_once} of a burst of 8 reached a worker with 2 places: {:?}",
        received(&w)
    );
    for r in burst {
        assert_eq!(r.await.unwrap().0, 200);
    }
    assert_eq!(received(&w).len(), 8);
}

#[tokio::test]
async fn a_full_waiting_room_sheds_the_lowest_priority_first() {
    let valkey = Valkey::start();
    let w = worker(&valkey).await;
    let r = Router::start(&valkey.url(), args(Duration::from_secs(20), 2)).await;
    warm(&valkey, &[&r], &w, 400).await;
    let first = send(&r, "one", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let low0 = send(&r, "low0", None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let low1 = send(&r, "low1", None);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Full: a high-priority arrival sheds the latest low-priority waiter.
    let high = send(&r, "high", Some("high"));
    assert_eq!(low1.await.unwrap(), (503, "queue_full".to_owned()));
    // Full again: a low-priority arrival is itself the lowest.
    let low2 = send(&r, "low2", None);
    assert_eq!(low2.await.unwrap(), (503, "queue_full".to_owned()));
    assert_eq!(first.await.unwrap().0, 200);
    assert_eq!(high.await.unwrap().0, 200);
    assert_eq!(low0.await.unwrap().0, 200);
    assert_eq!(received(&w), ["one", "high", "low0"]);
}

fn body(prompt: &str) -> Value {
    json!({ "model": MODEL, "prompt": prompt, "max_tokens": 1 })
}

/// Sends the request that holds the worker ("one"); its status when done.
fn occupy(url: &str) -> tokio::task::JoinHandle<reqwest::StatusCode> {
    let request = http().post(url).json(&body("one"));
    tokio::spawn(async move { request.send().await.unwrap().status() })
}

/// One unanswered poll (Valkey paused for 300 ms, so the routing lane's
/// calls time out) is not an outage: the waiting request keeps its place
/// and is not sent to the busy worker (it was, with every waiting request
/// of the router, before; found by the overload benchmark).
#[tokio::test]
async fn a_lost_reply_does_not_release_the_waiting_room_nor_let_an_arrival_past() {
    let v = Valkey::start();
    let w = worker(&v).await;
    let mut a = args(Duration::from_secs(10), 1024);
    // The routing lane's deadline, as in production (20 ms): a pause of
    // Valkey times its calls out.
    a.valkey_timeout = Some(Duration::from_millis(20));
    let router = Router::start(&v.url(), a).await;
    warm(&v, &[&router], &w, 2500).await;
    let url = router.url("/v1/completions");
    let first = occupy(&url);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = send(&router, "two", None);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut c = v.conn();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(300)
        .arg("ALL")
        .query::<()>(&mut c)
        .unwrap();
    // A request arriving while its call times out asks again: it does not
    // go past the waiting room to the saturated worker.
    let third = send(&router, "three", None);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        received(&w),
        ["one"],
        "a request went past the waiting room"
    );
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(second.await.unwrap().0, 200);
    assert_eq!(third.await.unwrap().0, 200);
    assert_eq!(received(&w), ["one", "two", "three"]);
}

/// A dispatch whose reply the router never saw (its call timed out on
/// the routing lane while Valkey still ran it: the overload benchmark's
/// interactive requests then waited out their 20 s) is handed on by the
/// router's next call, not left waiting until its timeout. The lost reply
/// is made deterministic: a caller with the router's id and a higher
/// in-flight limit dispatches its waiting request, and the reply goes to
/// the test.
#[tokio::test]
async fn a_dispatch_whose_reply_was_lost_is_handed_on_by_the_next_call() {
    let v = Valkey::start();
    let w = worker(&v).await;
    let mut a = args(Duration::from_secs(3), 1024);
    a.router_id = Some("ra".into());
    let router = Router::start(&v.url(), a).await;
    warm(&v, &[&router], &w, 6000).await;
    let first = occupy(&router.url("/v1/completions"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = send(&router, "two", None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(received(&w), ["one"]);
    let thief = StateStore::new(
        ConnectionSettings::new(&v.url()),
        "pr",
        "ra",
        StateTtls::default(),
        BatchLimits::default(),
    )
    .unwrap();
    let two_places = SaturationThresholds {
        max_in_flight: 2,
        waiting: None,
        kv_usage: None,
        prefill_tokens: None,
        stale_load: Duration::from_secs(10),
    };
    let lost = thief
        .flow_dispatch(MODEL, &two_places, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert_eq!(lost.dispatched.len(), 1, "{lost:?}");
    // On the old code "two" waited out its 3 s: a 503 queue_timeout.
    let (status, err) = second.await.unwrap();
    assert_eq!(status, 200, "{err}");
    assert_eq!(received(&w), ["one", "two"]);
    assert_eq!(first.await.unwrap(), 200);
}

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
