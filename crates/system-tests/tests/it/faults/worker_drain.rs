//! Fault 7 (issue 29): a worker stopped with SIGTERM under load drains.
//!
//! Two routers, three sims, 25 req/s (a share streamed). SIGTERM to sim-1:
//! it marks itself draining through the balancer, finishes what it has,
//! deregisters and exits. Asserts: no client request failed and no attempt
//! failed, and no router retried one on another worker (there was nothing
//! to retry: no router sent the draining worker a request once it was
//! marked, and its answers finished); it was
//! listed `draining` and exited cleanly; restarted under the same id it
//! registers live again; the state converged and `inspect --check` is
//! clean.

use std::time::{Duration, Instant};

use crate::fleet::{Fleet, FleetSpec, PATIENCE, sim_flags};
use crate::load::{Load, LoadConfig, counts, failures};

pub async fn run() {
    let mut f = Fleet::start("worker-drain", FleetSpec::default()).await;
    // Answers of about 2 s (5 ms a token): SIGTERM finds some running, and
    // the sim stays `draining` until they finish, long enough for the
    // worker list's polls below to see it on a loaded machine (with 0.8 s
    // answers the state came and went between two polls at load 10-30).
    let cfg = LoadConfig {
        rate: 25.0,
        max_tokens: 400,
        ..LoadConfig::default()
    };
    let traffic = Load::start(f.url(), cfg, f.epoch);
    tokio::time::sleep(Duration::from_secs(4)).await;

    let victim = "sim-1";
    let mut sim = f.sims[1].take().expect("sim-1");
    let retries_before = f.metric("prefix_router_upstream_retries_total", "").await;
    let term = f.now();
    sim.sigterm();
    f.mark("sim-1 SIGTERM");
    let deadline = Instant::now() + PATIENCE;
    let seen_draining = loop {
        let listed = f.workers().await;
        if listed.iter().any(|(w, s)| w == victim && s == "draining") {
            break f.mark("sim-1 listed draining");
        }
        assert!(
            Instant::now() < deadline,
            "sim-1 never listed draining: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let status = sim.wait_exit().await;
    let exited = f.mark("sim-1 exited");
    assert!(status.success(), "sim-1 exit status {status:?}");
    drop(sim);
    // No router had to retry a request on another worker: none was sent
    // to sim-1 once it stopped taking them (before drains, a stopping sim
    // refused connections while still in routing).
    let retries = f.metric("prefix_router_upstream_retries_total", "").await - retries_before;
    assert_eq!(
        retries, 0.0,
        "routers retried requests sent to the stopping sim-1"
    );

    // Restarted under the same id: live again. Its drain ends when it
    // registers, before `start_sims` returns: requests sent from here on
    // may go to it.
    let restarting = f.mark("sim-1 restarting");
    let mut back = f.start_sims(&[victim.to_owned()], &sim_flags()).await;
    f.sims[1] = back.pop();
    f.mark("sim-1 restarted");
    let deadline = Instant::now() + PATIENCE;
    while !f
        .workers()
        .await
        .iter()
        .any(|(w, s)| w == victim && s == "live")
    {
        assert!(Instant::now() < deadline, "the restarted sim-1 is not live");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let records = traffic.stop().await;
    f.mark("load stopped");

    let c = counts(&records);
    let fails = failures(&records);
    println!("{fails}");
    assert_eq!(c.failed, 0, "client requests failed:\n{fails}");
    assert_eq!(c.failed_attempts, 0, "attempts failed:\n{fails}");
    let late: Vec<u64> = records
        .iter()
        .filter(|r| r.sent > seen_draining && r.sent < restarting)
        .filter(|r| r.worker.as_deref() == Some(victim))
        .map(|r| r.id)
        .collect();
    assert!(late.is_empty(), "sent to the draining sim-1: {late:?}");
    let converge = f.wait_converged("after the drain").await;
    f.inspect_check("after the drain").await;
    println!(
        "FAULTS worker-drain sent={} failed={} failed_attempts={} listed_draining_after={:.2}s \
         exited_after={:.2}s converge_after_stop={converge:.2}s",
        c.sent,
        c.failed,
        c.failed_attempts,
        seen_draining - term,
        exited - term,
    );
}
