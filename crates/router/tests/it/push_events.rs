//! `POST /internal/events` (one flush's stored and evicted blocks in one
//! request) against a real router on a real valkey-server: the same state
//! as the `stored` and `eviction` requests it replaces, its events applied
//! in order, bad bodies refused whole with a JSON 4xx; and the worker's
//! client against a router without the route (a small server here that
//! answers 404 to it): the two older requests, remembered.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{OriginalUri, State};
use axum::http::StatusCode;
use protocol::Tier;
use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;
use serde_json::{Value, json};
use support::{M, Router, TOKEN, Valkey, args, metrics_text, post, register};
use worker::push::{Batch, FleetClient, FleetClientConfig, WorkerIdentity};

fn bh(n: u64) -> BlockHash {
    BlockHash(n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn hexes(r: std::ops::Range<u64>) -> Vec<String> {
    r.map(|n| bh(n).to_hex()).collect()
}

/// worker → (hash → entry kind) of its live incarnation, and its digests.
fn entries(valkey: &Valkey, worker: &str) -> (BTreeMap<String, char>, BTreeMap<String, String>) {
    let mut c = valkey.conn();
    let base = format!("pr:{{{M}}}");
    let idx: String = redis::cmd("HGET")
        .arg(format!("{base}:ids"))
        .arg(worker)
        .query(&mut c)
        .unwrap();
    let raw = support::raw_state(valkey, "pr", M);
    let kinds = raw
        .forward
        .iter()
        .filter_map(|(h, m)| m.get(&idx).map(|(k, _)| (h.clone(), *k)))
        .collect();
    let digests = redis::cmd("HGETALL")
        .arg(format!("{base}:dg:{idx}"))
        .query(&mut c)
        .unwrap();
    (kinds, digests)
}

async fn check_clean(valkey: &Valkey) {
    let mut inspect = state::inspect::InspectArgs::new(&valkey.url());
    inspect.recheck_delay = Duration::ZERO;
    let report = state::inspect::check(&inspect).await.unwrap();
    assert!(report.clean, "{:#?}", report.shown);
}

async fn ok(r: &Router, path: &str, body: Value) -> Value {
    let (status, reply) = post(r, path, &body).await;
    assert_eq!(status, 200, "{path}: {reply}");
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_request_leaves_the_state_of_its_stored_and_eviction_requests() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    for w in ["w1", "w2"] {
        register(&r, w).await;
        let body = json!({"worker_id": w, "model": M, "block_hashes": hexes(0..200)});
        ok(&r, "/internal/stored", body).await;
    }
    // One flush: evictions (held and unknown blocks), new blocks and a
    // re-stored one on the GPU, demotions to the CPU.
    let (gone, back, demoted) = (hexes(150..250), hexes(240..320), hexes(0..40));
    let w1 = [
        ok(
            &r,
            "/internal/eviction",
            json!({"worker_id": "w1", "evicted_hashes": gone}),
        )
        .await,
        ok(
            &r,
            "/internal/stored",
            json!({"worker_id": "w1", "block_hashes": back}),
        )
        .await,
        ok(
            &r,
            "/internal/stored",
            json!({"worker_id": "w1", "block_hashes": demoted, "medium": "cpu"}),
        )
        .await,
    ];
    let events = json!({"worker_id": "w2", "model": M, "events": [
        {"kind": "evicted", "block_hashes": gone},
        {"kind": "stored", "block_hashes": back},
        {"kind": "stored", "block_hashes": demoted, "medium": "cpu"},
    ]});
    let w2 = ok(&r, "/internal/events", events).await;
    let sum = |k: &str| w1.iter().map(|v| v[k].as_u64().unwrap_or(0)).sum::<u64>();
    for k in ["inserted", "promoted", "refreshed", "removed"] {
        assert_eq!(w2[k].as_u64(), Some(sum(k)), "{k}: {w2} vs {w1:?}");
    }
    assert_eq!(w2["removed"], 50);
    assert_eq!(entries(&valkey, "w1"), entries(&valkey, "w2"));
    let (kinds, _) = entries(&valkey, "w2");
    assert_eq!(kinds.len(), 150 + 80, "{kinds:?}");
    assert_eq!(kinds.values().filter(|k| **k == 'h').count(), 40);
    check_clean(&valkey).await;
    let metrics = metrics_text(&r).await;
    assert!(
        metrics.contains(r#"route="/internal/events",status="200""#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_apply_in_order_and_a_bad_body_writes_nothing() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    register(&r, "w").await;
    let (a, b) = (bh(1).to_hex(), bh(2).to_hex());
    // Stored, evicted, stored again in one flush: held; stored then
    // evicted: not.
    let reply = ok(
        &r,
        "/internal/events",
        json!({"worker_id": "w", "events": [
            {"kind": "stored", "block_hashes": [a, b]},
            {"kind": "evicted", "block_hashes": [a, b]},
            {"kind": "stored", "block_hashes": [a], "medium": "cpu"},
        ]}),
    )
    .await;
    assert_eq!(
        reply,
        json!({"inserted": 3, "promoted": 0, "refreshed": 0, "removed": 2})
    );
    let want: BTreeSet<String> = [a.clone()].into();
    assert_eq!(support::worker_blocks(&valkey, "pr", M, "w"), want);
    assert_eq!(entries(&valkey, "w").0[&a], 'h');
    let before = entries(&valkey, "w");
    // Each bad body starts with a good event: none of it may be written.
    let good = json!({"kind": "stored", "block_hashes": hexes(10..20)});
    let too_many: Vec<String> = hexes(100..100 + 65_536);
    for (bad, status, kind) in [
        (
            json!({"kind": "stored", "block_hashes": [b], "families": [null, null]}),
            400,
            "invalid_request",
        ),
        (
            json!({"kind": "evicted", "block_hashes": [b], "medium": "cpu"}),
            400,
            "invalid_request",
        ),
        (
            json!({"kind": "removed", "block_hashes": [b]}),
            400,
            "invalid_request",
        ),
        (
            json!({"kind": "stored", "block_hashes": ["xyz"]}),
            400,
            "invalid_request",
        ),
        (
            json!({"kind": "stored", "block_hashes": [b], "medium": "tape"}),
            400,
            "invalid_request",
        ),
        // 10 + 65,536 hashes in all: over the limit of one request (413, as
        // a stored request over it).
        (
            json!({"kind": "evicted", "block_hashes": too_many}),
            413,
            "too_many_hashes",
        ),
    ] {
        let body = json!({"worker_id": "w", "events": [good, bad]});
        let (st, reply) = post(&r, "/internal/events", &body).await;
        let what = serde_json::to_string(&bad).unwrap();
        let what = &what[..what.len().min(80)];
        assert_eq!(st, status, "{what}: {reply}");
        assert_eq!(reply["error"]["type"], kind, "{what}: {reply}");
        assert_eq!(entries(&valkey, "w"), before, "{what}");
    }
    // An unknown worker: 404 unknown_worker; no token: 401.
    let body = json!({"worker_id": "nobody", "model": M, "events": [good]});
    let (st, reply) = post(&r, "/internal/events", &body).await;
    assert_eq!(
        (st, reply["error"]["type"].as_str()),
        (404, Some("unknown_worker")),
        "{reply}"
    );
    let resp = support::http()
        .post(r.url("/internal/events"))
        .json(&json!({"worker_id": "w", "events": [good]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(entries(&valkey, "w"), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_events_request_carries_a_heartbeat() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    let hb = json!({"worker_id": "w", "model": M, "url": "http://127.0.0.1:9",
        "load": {"num_requests_waiting": 3}});
    let events = json!([{"kind": "stored", "block_hashes": hexes(0..5)}]);
    // A worker unknown so far: registered by the carried heartbeat, then
    // its events applied.
    let body = json!({"worker_id": "w", "model": M, "events": events, "heartbeat": hb});
    let first = ok(&r, "/internal/events", body.clone()).await;
    assert_eq!(first["inserted"], 5, "{first}");
    assert_eq!(first["heartbeat"]["registered"], true, "{first}");
    assert!(first["heartbeat"]["lease_ms"].as_u64() > Some(0), "{first}");
    let again = ok(&r, "/internal/events", body).await;
    assert_eq!(again["heartbeat"]["registered"], false, "{again}");
    assert_eq!(
        again["heartbeat"]["incarnation"],
        first["heartbeat"]["incarnation"]
    );
    assert_eq!(again["refreshed"], 5, "{again}");
    assert_eq!(support::worker_blocks(&valkey, "pr", M, "w").len(), 5);
    // Without a heartbeat the reply has none; one for another worker, or
    // with a bad URL, is refused and nothing is written.
    let plain = ok(
        &r,
        "/internal/events",
        json!({"worker_id": "w", "events": []}),
    )
    .await;
    assert!(plain.get("heartbeat").is_none(), "{plain}");
    let before = entries(&valkey, "w");
    let more = json!([{"kind": "stored", "block_hashes": hexes(10..20)}]);
    for hb in [
        json!({"worker_id": "v", "model": M, "url": "http://127.0.0.1:9"}),
        json!({"worker_id": "w", "url": "http://127.0.0.1:9"}),
        json!({"worker_id": "w", "model": M, "url": "ftp://x"}),
    ] {
        let body = json!({"worker_id": "w", "model": M, "events": more, "heartbeat": hb});
        let (st, reply) = post(&r, "/internal/events", &body).await;
        assert_eq!(st, 400, "{hb}: {reply}");
        assert_eq!(entries(&valkey, "w"), before, "{hb}");
    }
    let (_, v) = support::get(&r, "/admin/workers").await;
    assert!(v.to_string().contains("\"w\""), "{v}");
}

/// What the small server below received: (path, body).
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A router of a version without `/internal/events`: 404 `not_found` to
/// it (as the router's fallback answers), the older reports accepted.
async fn old_router(
    State(seen): State<Seen>,
    uri: OriginalUri,
    body: Json<Value>,
) -> (StatusCode, Json<Value>) {
    let path = uri.path().to_owned();
    seen.lock().unwrap().push((path.clone(), body.0));
    match path.as_str() {
        "/internal/stored" => (
            StatusCode::OK,
            Json(json!({"inserted": 0, "promoted": 0, "refreshed": 0})),
        ),
        "/internal/eviction" => (StatusCode::OK, Json(json!({"removed": 0}))),
        _ => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": {"message": "no such route", "type": "not_found", "code": 404}})),
        ),
    }
}

fn identity() -> WorkerIdentity {
    WorkerIdentity {
        worker_id: "w".into(),
        model: M.into(),
        url: "http://127.0.0.1:9".into(),
        role: None,
    }
}

fn batch() -> Batch {
    let on = |n: u64, tier: Tier| FamilyBlock {
        tier,
        ..FamilyBlock::unplaced(bh(n))
    };
    Batch {
        stored: vec![on(1, Tier::Gpu), on(2, Tier::Cpu)],
        evicted: vec![on(3, Tier::Gpu)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_falls_back_to_stored_and_eviction_on_a_router_without_events() {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .fallback(old_router)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = FleetClient::new(FleetClientConfig::new(format!("http://{addr}"), None)).unwrap();
    let paths = || -> Vec<String> { seen.lock().unwrap().drain(..).map(|(p, _)| p).collect() };
    client.events(&identity(), &batch()).await.unwrap();
    assert_eq!(
        paths(),
        [
            "/internal/events",
            "/internal/eviction",
            "/internal/stored",
            "/internal/stored"
        ]
    );
    // Remembered: the next flush goes straight to the two older requests,
    // from every clone of the client.
    client.clone().events(&identity(), &batch()).await.unwrap();
    let bodies: Vec<(String, Value)> = seen.lock().unwrap().drain(..).collect();
    let sent: Vec<&str> = bodies.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        sent,
        ["/internal/eviction", "/internal/stored", "/internal/stored"]
    );
    assert_eq!(bodies[0].1["evicted_hashes"], json!([bh(3).to_hex()]));
    assert_eq!(bodies[1].1["block_hashes"], json!([bh(1).to_hex()]));
    assert_eq!(bodies[2].1["medium"], "cpu");
    // A heartbeat cannot ride on the older requests: not carried.
    let carried = client
        .events_with_heartbeat(&identity(), &batch(), None, None)
        .await
        .unwrap();
    assert!(carried.is_none());
    assert!(paths().iter().all(|p| p != "/internal/events"));
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_sends_one_events_request_per_flush_to_a_router_with_it() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    let client = FleetClient::new(FleetClientConfig::new(r.url(""), Some(TOKEN.into()))).unwrap();
    client.heartbeat(&identity(), None, None).await.unwrap();
    client.events(&identity(), &batch()).await.unwrap();
    let want: BTreeSet<String> = [bh(1).to_hex(), bh(2).to_hex()].into();
    assert_eq!(support::worker_blocks(&valkey, "pr", M, "w"), want);
    assert_eq!(entries(&valkey, "w").0[&bh(2).to_hex()], 'h');
    let metrics = metrics_text(&r).await;
    assert!(
        metrics.contains(r#"route="/internal/events",status="200"} 1"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"route="/internal/stored""#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"route="/internal/eviction""#),
        "{metrics}"
    );
}
