//! Worker URLs: only `http[s]://host[:port][/path]` registers; a live
//! worker's URL changes only through its own re-registration after its
//! lease lapses or it is drained (409 before); a URL at the router's own
//! listener is refused, and a request that comes back to a router through a
//! worker URL pointing at another router is stopped with a 508 at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::{M, Router, TOKEN, Valkey, args, get, http, post};

fn heartbeat(id: &str, url: &str) -> serde_json::Value {
    json!({"worker_id": id, "url": url, "model": M})
}

#[tokio::test]
async fn only_base_urls_register() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    for url in [
        "http://h:1/base?x=1",
        "http://h:1/#frag",
        "http://user:pw@h:1",
        "http://h:99999",
        "ftp://h:1",
        "http:// h:1",
    ] {
        let (st, body) = post(&r, "/internal/heartbeat", &heartbeat("w0", url)).await;
        assert_eq!(st, 400, "{url}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request", "{url}");
    }
    // The router's own listener would loop.
    let own = r.url("");
    let (st, body) = post(&r, "/internal/heartbeat", &heartbeat("w0", &own)).await;
    assert_eq!(st, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("own listeners")
    );
    let (st, _) = post(
        &r,
        "/internal/heartbeat",
        &heartbeat("w0", "http://10.0.0.5:8000/v"),
    )
    .await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn a_live_workers_url_is_bound_to_its_registration() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    let first = heartbeat("w0", "http://10.0.0.5:8000");
    assert_eq!(post(&r, "/internal/heartbeat", &first).await.0, 200);
    // Renewing with the same URL is fine; another URL is a conflict and
    // changes nothing.
    assert_eq!(post(&r, "/internal/heartbeat", &first).await.0, 200);
    let (st, body) = post(
        &r,
        "/internal/heartbeat",
        &heartbeat("w0", "http://10.6.6.6:8000"),
    )
    .await;
    assert_eq!(st, 409, "{body}");
    assert_eq!(body["error"]["type"], "worker_url_conflict");
    let (_, workers) = get(&r, &format!("/admin/workers?model={M}")).await;
    assert_eq!(workers["workers"][0]["url"], "http://10.0.0.5:8000");
    // Once drained, the id registers anew with any URL.
    let resp = http()
        .delete(r.url(&format!("/internal/workers/w0?model={M}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (st, body) = post(
        &r,
        "/internal/heartbeat",
        &heartbeat("w0", "http://10.6.6.6:8000"),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["registered"], true);
}

#[tokio::test]
async fn a_worker_url_pointing_at_a_router_is_stopped_at_the_first_hop() {
    let valkey = Valkey::start();
    let a = Router::start(&valkey.url(), args()).await;
    let b = Router::start(&valkey.url(), args()).await;
    // The misconfiguration: a "worker" whose URL is router b.
    let (st, _) = post(&a, "/internal/heartbeat", &heartbeat("loop", &b.url(""))).await;
    assert_eq!(st, 200);
    let resp = tokio::time::timeout(
        Duration::from_secs(30),
        http()
            .post(a.url("/v1/completions"))
            .json(&json!({"model": M, "prompt": "hello", "max_tokens": 1}))
            .send(),
    )
    .await
    .expect("an answer, not a loop")
    .unwrap();
    assert_eq!(resp.status().as_u16(), 508);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "forwarding_loop");

    // A request that carries the mark from elsewhere is refused on entry.
    let resp = http()
        .post(a.url("/v1/completions"))
        .header("via", "1.1 prefix-router")
        .json(&json!({"model": M, "prompt": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 508);
}

#[test]
fn a_static_worker_at_the_routers_own_listener_stops_it_from_starting() {
    let mut a = args();
    a.internal_token = Some("t".into());
    a.listen = Some("127.0.0.1:18080".parse().unwrap());
    a.model = Some(M.into());
    a.workers = vec!["self=http://localhost:18080".parse().unwrap()];
    let err = prefix_router::ServeConfig::resolve(a).unwrap_err();
    assert!(err.to_string().contains("own listener"), "{err:#}");
}

#[tokio::test]
async fn a_502_does_not_show_the_workers_internal_url() {
    let valkey = Valkey::start();
    let r = Router::start(&valkey.url(), args()).await;
    let dead = "http://127.0.0.1:9";
    assert_eq!(
        post(&r, "/internal/heartbeat", &heartbeat("w0", dead))
            .await
            .0,
        200
    );
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&json!({"model": M, "prompt": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 502);
    let body = resp.text().await.unwrap();
    assert!(body.contains("upstream_unavailable"), "{body}");
    for secret in ["127.0.0.1", ":9", "w0"] {
        assert!(!body.contains(secret), "{secret} leaked: {body}");
    }
}
