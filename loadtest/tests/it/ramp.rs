//! `loadtest ramp` end to end on tiny fleets (Valkey, one router behind the
//! builtin balancer, two sims): a bound no step can break runs every
//! factor and the capacity is the last; a bound every step breaks (1 ms)
//! stops the arm after its first step, with no capacity.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::time::Duration;

use clap::Parser;
use loadtest::cli::{Cli, Command};
use loadtest::ramp::{RampArgs, ramp};

use crate::common;

fn ramp_args(out: &std::path::Path, bound: &str) -> RampArgs {
    let bins = common::binaries();
    let out = out.display().to_string();
    let router = bins.router.display().to_string();
    let sim = bins.sim.display().to_string();
    let argv = [
        "loadtest",
        "ramp",
        "--workload",
        "rag",
        "--api",
        "completions",
        "--documents",
        "3",
        "--doc-words",
        "200",
        "--question-words",
        "8",
        "--output-tokens",
        "4",
        "--rate",
        "4",
        "--duration",
        "3s",
        "--time-scale",
        "0.05",
        "--workers",
        "2",
        "--num-blocks",
        "2048",
        "--policies",
        "cache_aware:1",
        "--balancer",
        "builtin",
        "--calibration",
        "0",
        "--router-bin",
        &router,
        "--sim-bin",
        &sim,
        "--factors",
        "1,2",
        "--ttft-p99",
        bound,
        "--out",
        &out,
    ];
    match Cli::try_parse_from(argv).expect("ramp flags").command {
        Command::Ramp(a) => *a,
        other => panic!("parsed as {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ramp_climbs_while_steps_hold_and_stops_at_the_first_that_breaks() {
    let out = tempfile::tempdir().expect("tempdir");
    let held = out.path().join("held");
    let r = tokio::time::timeout(Duration::from_secs(240), ramp(ramp_args(&held, "1h")))
        .await
        .expect("the ramp took over 240 s")
        .expect("ramp");
    let factors: Vec<(f64, bool)> = r.steps.iter().map(|s| (s.factor, s.held)).collect();
    assert_eq!(factors, [(1.0, true), (2.0, true)], "{:?}", r.steps);
    let cap = r.capacity("cache_aware ×1").expect("a capacity");
    assert_eq!(cap.factor, 2.0);
    // Twice the arrival rate at the same time scale.
    let (one, two) = (&r.steps[0], &r.steps[1]);
    assert!(two.offered > 1.5 * one.offered, "{one:?} {two:?}");
    assert!((one.modelled - one.offered * 0.05).abs() < 1e-9);
    assert!(one.requests > 0 && one.failed == 0);
    let md = std::fs::read_to_string(held.join("ramp.md")).expect("ramp.md");
    assert!(md.contains("| cache_aware ×1 |"), "{md}");
    assert!(held.join("ramp.json").is_file());
    assert!(held.join("x2").is_dir());

    let broke = out.path().join("broke");
    let r = tokio::time::timeout(Duration::from_secs(240), ramp(ramp_args(&broke, "1ms")))
        .await
        .expect("the ramp took over 240 s")
        .expect("ramp");
    assert_eq!(r.steps.len(), 1, "stops at the first step: {:?}", r.steps);
    assert!(!r.steps[0].held);
    assert!(r.capacity("cache_aware ×1").is_none());
    assert!(!broke.join("x2").exists(), "no second step");
    let md = std::fs::read_to_string(broke.join("ramp.md")).expect("ramp.md");
    assert!(md.contains("below the first step"), "{md}");
}
