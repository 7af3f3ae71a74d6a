//! Fault 1: `kill -9` of a router under load behind the balancer.
//!
//! Three routers behind HAProxy, three sims, 30 req/s of shared-prefix
//! prompts. Router r1 is SIGKILLed mid-load, then restarted on its port.
//! Asserts: no client request failed (the client resends a request whose
//! connection died before a complete answer, see `load.rs`); every failed
//! *attempt* was in flight at the killed router at the instant of the kill
//! (a connection HAProxy placed afterwards never failed: its connect to the
//! dead port was retried on another router); HAProxy marked r1 down and
//! back up, and sent it connections again; the restarted router routes a
//! repeated prefix warm (to a worker that holds it, which reports cached
//! tokens); the state converges and `inspect --check` is clean.

use std::time::Duration;

use serde_json::Value;

use crate::fleet::{Fleet, FleetSpec, balancer_log};
use crate::load::{self, Load, LoadConfig, counts, failures};
use crate::support::{TOKEN, http};

pub async fn run() {
    let spec = FleetSpec {
        routers: 3,
        ..FleetSpec::default()
    };
    let mut f = Fleet::start("router-kill", spec).await;
    let cfg = LoadConfig {
        rate: 30.0,
        // ~130 ms per request (24 tokens at 5 ms): several in flight.
        max_tokens: 24,
        ..LoadConfig::default()
    };
    let traffic = Load::start(f.url(), cfg.clone(), f.epoch);
    tokio::time::sleep(Duration::from_secs(4)).await;

    let (kill_start, killed) = f.kill_router(1);
    let down = f.wait_balancer(1, false).await;
    f.mark("HAProxy marked r1 DOWN");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sessions_before = r1_sessions(&f);
    let restarted = f.restart_router(1).await;
    let up = f.wait_balancer(1, true).await;
    f.mark("HAProxy marked r1 UP");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let records = traffic.stop().await;
    let stopped = f.mark("load stopped");
    let sessions_after = r1_sessions(&f);

    let c = counts(&records);
    let fails = failures(&records);
    println!("{fails}");
    assert!(c.sent > 200, "too few requests sent: {c:?}");
    assert_eq!(c.failed, 0, "client requests failed:\n{fails}");
    // Every failed attempt was in flight at r1 when it died.
    for r in &records {
        for a in r.failed_attempts() {
            assert!(
                a.start <= killed && a.end >= kill_start - 0.05,
                "an attempt failed that was not in flight at the kill \
                 ({kill_start:.2}..{killed:.2}s): request {} {a:?}",
                r.id
            );
        }
    }
    let during = records
        .iter()
        .filter(|r| r.sent > killed && r.sent < restarted)
        .count();
    assert!(during > 0, "no request was sent while r1 was down");
    assert!(
        sessions_after > sessions_before,
        "HAProxy sent nothing to the restarted r1 ({sessions_before} → {sessions_after} sessions)"
    );
    let log = balancer_log(&f.balancer.log());

    // The restarted router routes warm: a repeated prefix goes to a worker
    // holding it, which reports a cache hit.
    let r1 = f.router(1).base.clone();
    for doc in 0..3 {
        let text = load::document(cfg.doc_prefix, doc, cfg.doc_lines);
        let body = load::body(&text, 1_000_000 + doc as u64, 4, false);
        let explained: Value = http()
            .post(format!("{r1}/admin/explain"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .expect("explain")
            .json()
            .await
            .expect("explain JSON");
        let rows = explained["candidates"].as_array().expect("candidates");
        let deepest = rows
            .iter()
            .filter_map(|c| c["matched_blocks"].as_u64())
            .max()
            .unwrap_or(0);
        assert!(deepest > 0, "nobody holds document {doc}: {explained}");
        let holders: Vec<&str> = rows
            .iter()
            .filter(|c| c["matched_blocks"].as_u64() == Some(deepest))
            .filter_map(|c| c["worker_id"].as_str())
            .collect();
        let resp = http()
            .post(format!("{r1}/v1/completions"))
            .json(&body)
            .send()
            .await
            .expect("warm request");
        assert_eq!(resp.status(), 200);
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let (worker, cached) = (header("x-sim-worker"), header("x-sim-cached-tokens"));
        let cached: u64 = cached.parse().expect("x-sim-cached-tokens");
        assert!(
            holders.contains(&worker.as_str()) && cached > 0,
            "document {doc} after the restart went to {worker} ({cached} cached tokens), \
             holders {holders:?} with {deepest} blocks"
        );
        println!(
            "warm after restart: document {doc} → {worker}, {cached} cached tokens \
             (holders {holders:?}, {deepest} blocks)"
        );
    }

    let converge = f.wait_converged("after the router kill").await;
    f.inspect_check("after the router kill").await;
    let cut = records.iter().filter(|r| r.attempts.len() > 1).count();
    println!(
        "FAULTS router-kill sent={} failed={} retried_by_client={} failed_attempts={} \
         sent_while_down={} haproxy_down_after={:.2}s haproxy_up_after_restart={:.2}s \
         haproxy_connections={} haproxy_retried={} haproxy_redispatched={} haproxy_abnormal={:?} \
         haproxy_empty_answers={:?} \
         cached_share={:.3} converge_after_stop={:.2}s (stopped at {:.1}s)",
        c.sent,
        c.failed,
        cut,
        c.failed_attempts,
        during,
        down - kill_start,
        up - restarted,
        log.connections,
        log.retried,
        log.redispatched,
        log.abnormal,
        log.empty,
        c.cached_share,
        converge,
        stopped
    );
}

fn r1_sessions(f: &Fleet) -> u64 {
    f.balancer
        .servers()
        .into_iter()
        .find(|(n, _, _)| n == "r1")
        .map(|(_, _, s)| s)
        .unwrap_or(0)
}
