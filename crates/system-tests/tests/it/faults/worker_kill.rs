//! Fault 3: a worker crashes under load (`/sim/faults {"crash": true}`:
//! exit 137 at once, like `kill -9`).
//!
//! Two routers (`--worker-lease 2s`), three sims, 25 req/s. Asserts: no
//! client request failed (requests routed to the dead worker before its
//! lease ran out were retried by the router on the next worker before any
//! byte reached the client — `prefix_router_upstream_retries_total` grew
//! — and the few that were mid-answer at the crash were resent by the
//! client, see `load.rs`); its lease expired and routing stopped trying it
//! (the retry counter stops growing); its entries were purged by gc (no
//! forward entry, reverse set or record of its incarnation left); the
//! other workers' state converged and `inspect --check` is clean.

use std::time::{Duration, Instant};

use crate::fleet::{Fleet, FleetSpec, MODEL, PATIENCE, PREFIX};
use crate::load::{Load, LoadConfig, counts, failures};
use crate::support::raw_state;

pub async fn run() {
    let mut f = Fleet::start("worker-kill", FleetSpec::default()).await;
    let cfg = LoadConfig {
        rate: 25.0,
        max_tokens: 24,
        ..LoadConfig::default()
    };
    let traffic = Load::start(f.url(), cfg, f.epoch);
    tokio::time::sleep(Duration::from_secs(4)).await;

    let victim = "sim-1";
    let idx = f.held(victim).idx.expect("sim-1 registered");
    let retries_before = f.metric("prefix_router_upstream_retries_total", "").await;
    let crash_start = f.now();
    let mut sim = f.sims[1].take().expect("sim-1");
    sim.crash().await;
    drop(sim);
    let crashed = f.mark("sim-1 crashed (exit 137)");

    // Its lease runs out: it leaves routing.
    let deadline = Instant::now() + PATIENCE;
    while f
        .workers()
        .await
        .iter()
        .any(|(w, s)| w == victim && s == "live")
    {
        assert!(Instant::now() < deadline, "sim-1 stayed live");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = f.mark("sim-1 out of routing (lease expired)");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let retries_at_out = f.metric("prefix_router_upstream_retries_total", "").await;

    // Its entries are purged (by gc, while the load goes on).
    let purged = wait_purged(&f, &idx).await;
    let rest = (out + 3.0 - f.now()).max(0.5);
    tokio::time::sleep(Duration::from_secs_f64(rest)).await;
    let records = traffic.stop().await;
    f.mark("load stopped");
    let retries_end = f.metric("prefix_router_upstream_retries_total", "").await;

    let c = counts(&records);
    let fails = failures(&records);
    println!("{fails}");
    assert_eq!(c.failed, 0, "client requests failed:\n{fails}");
    for r in &records {
        for a in r.failed_attempts() {
            assert!(
                a.start <= crashed && a.end >= crash_start - 0.05,
                "an attempt failed that was not in flight at the crash: request {} {a:?}",
                r.id
            );
        }
    }
    assert!(
        retries_at_out > retries_before,
        "no router retried a request on another worker ({retries_before} → {retries_at_out})"
    );
    assert_eq!(
        retries_end, retries_at_out,
        "routers still tried the dead worker after its lease expired"
    );
    assert!(
        records
            .iter()
            .filter(|r| r.sent > crashed)
            .all(|r| r.worker.as_deref() != Some(victim)),
        "answered by a dead worker?"
    );
    let converge = f.wait_converged("after the worker crash").await;
    f.inspect_check("after the worker crash").await;
    println!(
        "FAULTS worker-kill sent={} failed={} retried_by_client={} failed_attempts={} \
         router_retries={} lease_out_after={:.2}s purged_after={:.2}s \
         converge_after_stop={converge:.2}s cached_share={:.3}",
        c.sent,
        c.failed,
        c.retried,
        c.failed_attempts,
        retries_at_out - retries_before,
        out - crashed,
        purged - crashed,
        c.cached_share
    );
}

/// Waits until nothing of incarnation `idx` is left: no forward entry, no
/// record, reverse, speculative or sync set, not queued for purge.
async fn wait_purged(f: &Fleet, idx: &str) -> f64 {
    let base = format!("{PREFIX}:{{{MODEL}}}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let st = raw_state(&f.valkey, PREFIX, MODEL);
        let entries = st.forward.values().filter(|m| m.contains_key(idx)).count();
        let mut c = f.valkey.conn();
        let keys: Vec<String> = ["w", "r", "sp", "s"]
            .iter()
            .map(|k| format!("{base}:{k}:{idx}"))
            .collect();
        let existing: u64 = redis::cmd("EXISTS")
            .arg(&keys)
            .query(&mut c)
            .expect("EXISTS");
        let purging: bool = redis::cmd("SISMEMBER")
            .arg(format!("{base}:purge"))
            .arg(idx)
            .query(&mut c)
            .expect("SISMEMBER");
        if entries == 0 && existing == 0 && !purging {
            return f.mark(&format!("incarnation {idx} of sim-1 purged"));
        }
        assert!(
            Instant::now() < deadline,
            "incarnation {idx} never purged: {entries} forward entries, {existing} keys, purging {purging}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
