//! The settings a run's report lists: the offered load (against a
//! measured capacity), the fleet's shape, the sims' model, the binaries.

use super::{RunArgs, Runner, SIM_BLOCK_TOKENS};
use crate::topology::BalancerKind;
use crate::workload::Plan;

/// The plan's arrival rate, the same onto engines at real time (× the
/// sims' time scale), and its fraction of a measured `capacity` (req/s).
pub(super) fn offered_load(plan: &Plan, time_scale: f64, capacity: Option<f64>) -> String {
    let span = plan.span().as_secs_f64();
    let rate = if span > 0.0 {
        plan.requests() as f64 / span
    } else {
        0.0
    };
    let mut s = format!(
        "{rate:.2} req/s ({:.2} req/s onto engines at real time)",
        rate * time_scale
    );
    match capacity {
        Some(c) if c > 0.0 => {
            s += &format!(
                ", {:.0}% of the measured capacity of {c:.2} req/s",
                100.0 * rate / c
            )
        }
        _ => s += "; capacity not given (measure it with `loadtest ramp`, pass --capacity)",
    }
    s
}

/// The fleet's settings for the report.
pub(crate) fn fleet_settings(
    args: &RunArgs,
    runner: &Runner,
    time_scale: f64,
    input_cap: Option<usize>,
) -> Vec<(String, String)> {
    let b = &runner.base;
    let mut s = vec![
        ("workers".to_owned(), args.workers.to_string()),
        ("routers (default per arm)".into(), args.routers.to_string()),
        (
            "KV capacity per worker".into(),
            format!(
                "{} blocks × {SIM_BLOCK_TOKENS} tokens = {} tokens",
                args.num_blocks,
                args.num_blocks * SIM_BLOCK_TOKENS
            ),
        ),
        ("sim time scale".into(), time_scale.to_string()),
        ("sim max-num-seqs".into(), args.max_num_seqs.to_string()),
        ("sim prefills".into(), sim_prefill(&args.sim_args)),
        (
            "balancer".into(),
            match &b.balancer {
                BalancerKind::Haproxy(p) => format!("HAProxy ({}), TCP mode", p.display()),
                BalancerKind::Builtin => "builtin TCP balancer (in the load test)".into(),
            },
        ),
        (
            "isolated claim TTL".into(),
            format!("{:?}", args.isolated_ttl),
        ),
        ("event at".into(), format!("{} of the span", args.event_at)),
        (
            "down time at an event".into(),
            format!("{:.1} s", args.down_for.as_secs_f64()),
        ),
        ("valkey restart".into(), args.valkey_restart.clone()),
        (
            "valkey".into(),
            if args.valkey_cluster {
                "cluster 3+3"
            } else {
                "one server"
            }
            .into(),
        ),
        (
            "prefix-router".into(),
            b.routers.program.display().to_string(),
        ),
        ("sim-worker".into(), b.sim_program.display().to_string()),
    ];
    if let Some(c) = input_cap {
        s.push(("prompts cut to".into(), format!("{c} tokens")));
    }
    if !args.router_args.is_empty() {
        s.push(("extra router flags".into(), args.router_args.join(" ")));
    }
    if !args.sim_args.is_empty() {
        s.push(("extra sim flags".into(), args.sim_args.join(" ")));
    }
    s
}

/// How the sims share prefill compute: the last `--prefill` among the
/// extra sim flags, else the sims' default.
fn sim_prefill(sim_args: &[String]) -> String {
    let mut mode = None;
    let mut flags = sim_args.iter();
    while let Some(flag) = flags.next() {
        if let Some(v) = flag.strip_prefix("--prefill=") {
            mode = Some(v.to_owned());
        } else if flag == "--prefill" {
            mode = flags.next().cloned();
        }
    }
    match mode {
        Some(m) => m,
        None => "serial (the sims' default: one GPU's compute, shared)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Prompt, Session, Turn};
    use std::time::Duration;

    #[test]
    fn the_offered_load_is_given_at_the_sims_scale_and_against_the_capacity() {
        // 11 requests, one every 100 ms: 11 over a 1 s span.
        let turns = (0..=10)
            .map(|i| Turn {
                at: Duration::from_millis(100 * i),
                prompt: Prompt::Text("x".into()),
                max_tokens: 1,
            })
            .map(|t| Session { turns: vec![t] })
            .collect();
        let plan = Plan::new("t", turns);
        let with = offered_load(&plan, 0.125, Some(22.0));
        assert_eq!(
            with,
            "11.00 req/s (1.38 req/s onto engines at real time), 50% of the measured capacity of 22.00 req/s"
        );
        assert!(offered_load(&plan, 1.0, None).contains("capacity not given"));
    }

    #[test]
    fn the_sims_prefill_mode_is_the_last_flag_or_the_default() {
        let flags = |f: &[&str]| f.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(sim_prefill(&[]).starts_with("serial"));
        assert_eq!(sim_prefill(&flags(&["--prefill=parallel"])), "parallel");
        assert_eq!(
            sim_prefill(&flags(&[
                "--prefill",
                "parallel",
                "--seed",
                "1",
                "--prefill=serial"
            ])),
            "serial"
        );
    }
}
