//! Fault 5: a slow Valkey. The routers reach Valkey through a TCP proxy in
//! the test that holds every chunk for 50 ms, both ways; the routers keep
//! the default routing deadline (`--valkey-timeout 20ms`).
//!
//! Two routers, three sims, 25 req/s (a quarter streamed): 3 s at full
//! speed, 4 s slow, 4 s at full speed again. Asserts outcomes, never
//! latencies: every request answered; the routers routed by fallback while
//! Valkey was slow (`prefix_router_fallback_routes_total` grew); shared
//! routing resumed once the delay was removed (`decisions_total{outcome=
//! "hit"}` grew, and the share of fallback decisions fell); the state
//! converged (reports went through the slow proxy on the bulk lane, whose
//! deadline is 5 s) and `inspect --check` is clean.

use std::time::Duration;

use crate::fleet::{Fleet, FleetSpec, router_flags};
use crate::load::{Load, LoadConfig, counts, failures};

const FALLBACK: &str = "prefix_router_fallback_routes_total";
const DECISIONS: &str = "prefix_router_decisions_total";

/// (fallback routes, hit decisions, all decisions), summed over routers.
async fn sample(f: &Fleet) -> (f64, f64, f64) {
    (
        f.metric(FALLBACK, "").await,
        f.metric(DECISIONS, "outcome=\"hit\"").await,
        f.metric(DECISIONS, "").await,
    )
}

pub async fn run() {
    let spec = FleetSpec {
        slow_proxy: true,
        router_flags: router_flags().unset("--valkey-timeout"),
        ..FleetSpec::default()
    };
    let f = Fleet::start("slow-valkey", spec).await;
    let proxy = f.proxy.as_ref().expect("proxy");
    let cfg = LoadConfig {
        rate: 25.0,
        stream_share: 0.25,
        ..LoadConfig::default()
    };
    let traffic = Load::start(f.url(), cfg, f.epoch);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (fb0, _, all0) = sample(&f).await;
    proxy.set_delay(Duration::from_millis(50));
    let slow = f.mark("50 ms added per chunk between the routers and Valkey");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (fb1, hits1, all1) = sample(&f).await;
    proxy.set_delay(Duration::ZERO);
    let fast = f.mark("delay removed");
    // Shared routing resumes: the first 200 ms sample with new hits and no
    // new fallback.
    let mut resumed = None;
    let mut prev = (fb1, hits1);
    while f.now() < fast + 4.0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (fb, hits, _) = sample(&f).await;
        if resumed.is_none() && hits > prev.1 && fb == prev.0 {
            resumed = Some(f.mark("shared routing resumed") - fast);
        }
        prev = (fb, hits);
    }
    let (fb2, hits2, all2) = sample(&f).await;
    let records = traffic.stop().await;
    f.mark("load stopped");

    let c = counts(&records);
    let fails = failures(&records);
    println!("{fails}");
    assert_eq!(c.failed, 0, "client requests failed:\n{fails}");
    assert!(fb1 > fb0, "no fallback routing while Valkey was slow");
    assert!(
        hits2 > hits1,
        "shared routing did not resume ({hits1} → {hits2} hits)"
    );
    let share = |fb: f64, all: f64| if all > 0.0 { fb / all } else { 0.0 };
    let (slow_share, after_share, before_share) = (
        share(fb1 - fb0, all1 - all0),
        share(fb2 - fb1, all2 - all1),
        share(fb0, all0),
    );
    assert!(
        after_share < slow_share,
        "fallback share after the delay ({after_share:.2}) not below the slow window's ({slow_share:.2})"
    );
    let converge = f.wait_converged("after the slow Valkey").await;
    f.inspect_check("after the slow Valkey").await;
    let sent_slow = records
        .iter()
        .filter(|r| r.sent > slow && r.sent < fast)
        .count();
    println!(
        "FAULTS slow-valkey sent={} failed={} retried_by_client={} sent_while_slow={sent_slow} \
         fallback_share_before={before_share:.2} fallback_share_slow={slow_share:.2} \
         fallback_share_after={after_share:.2} fallback_routes_slow={} hits_after={} \
         resumed_after={} converge_after_stop={converge:.2}s cached_share={:.3}",
        c.sent,
        c.failed,
        c.retried,
        fb1 - fb0,
        hits2 - hits1,
        resumed.map_or("never (by 200 ms samples)".to_owned(), |r| format!(
            "{r:.2}s"
        )),
        c.cached_share
    );
}
