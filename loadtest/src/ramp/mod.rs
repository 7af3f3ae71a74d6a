//! `loadtest ramp`: the fleet's capacity, per policy.
//!
//! The workload of `loadtest run` (its flags, flattened) is replayed at
//! rising load factors: each multiplies the arrival rate (a trace's
//! `--speedup`, a synthetic workload's `--rate`) while the sims' time scale
//! stays the base's, so the same fleet is offered more and more. Each
//! factor runs every arm still standing, on a fresh fleet each, so the
//! arms of one factor run side by side. An arm stops at its first step
//! whose TTFT p99 passes `--ttft-p99` (2 s) or whose failed requests pass
//! `--max-failed`; its capacity is the offered rate of its last step that
//! held. `ramp.md` has every step (with its offered rate as a fraction of
//! that arm's capacity) and the capacities side by side; `ramp.json` the
//! same as data (`report`: the steps, capacities and their tables).

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use indicatif::MultiProgress;
use protocol::parse_duration;

use crate::cli::RunArgs;
use crate::drive::DriveOptions;
use crate::metrics::Summary;
use crate::run::{build_plan, fleet_runner};
use crate::scenario::Scenario;
use crate::topology::Arm;

mod report;

pub use report::{RampReport, Step, tables};
use report::{step_row, write};

/// `loadtest ramp`.
#[derive(Args, Debug, Clone)]
pub struct RampArgs {
    /// The workload, fleet and arms, as `loadtest run` takes them (the
    /// steady scenario only).
    #[command(flatten)]
    pub run: RunArgs,
    /// Load factors, tried in order: each multiplies the workload's arrival
    /// rate (a trace's --speedup, else --rate); the sims' time scale stays
    /// the factor-1 run's.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0f64, 1.5, 2.0, 3.0, 4.0], help_heading = "Ramp")]
    pub factors: Vec<f64>,
    /// A step holds while its TTFT p99 stays at or under this.
    #[arg(long, default_value = "2s", value_parser = parse_duration, help_heading = "Ramp")]
    pub ttft_p99: Duration,
    /// A step holds while at most this fraction of its requests fail.
    #[arg(long, default_value_t = 0.0, help_heading = "Ramp")]
    pub max_failed: f64,
}

/// Whether a step with `summary` holds under the bounds.
pub fn holds(summary: &Summary, ttft_p99: Duration, max_failed: f64) -> bool {
    let failed = if summary.requests == 0 {
        1.0
    } else {
        summary.failed as f64 / summary.requests as f64
    };
    let ttft = summary.ttft_ms.as_ref().map(|p| p.p99);
    failed <= max_failed && ttft.is_some_and(|p99| p99 <= ttft_p99.as_secs_f64() * 1e3)
}

/// The `loadtest run` flags of the step at `factor`: the arrival rate
/// multiplied, the time scale pinned to `time_scale`.
pub fn step_args(base: &RunArgs, factor: f64, time_scale: f64) -> RunArgs {
    let mut a = base.clone();
    if a.workload == "trace" {
        a.speedup *= factor;
    } else {
        a.rate *= factor;
    }
    a.time_scale = Some(time_scale);
    a
}

/// Runs the ramp; writes `ramp.md` and `ramp.json` and prints the tables;
/// returns the report.
pub async fn ramp(a: RampArgs) -> anyhow::Result<RampReport> {
    let base = &a.run;
    if base.target.is_some() {
        bail!("ramp launches its own fleets; --target is not supported");
    }
    if base.no_stream {
        bail!("ramp bounds TTFT, which needs streamed answers (drop --no-stream)");
    }
    if base.scenario.iter().any(|s| *s != Scenario::Steady) {
        bail!("ramp runs the steady scenario only");
    }
    if a.factors.is_empty() || a.factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
        bail!("--factors must be positive numbers");
    }
    if !(0.0..=1.0).contains(&a.max_failed) {
        bail!("--max-failed must be within 0..=1");
    }
    let (plan, time_scale, _) = build_plan(base)?;
    let out = crate::report::out_dir(base.out.as_deref(), "ramp-");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let arms = crate::run::parse_arms(base)?;
    let drive = DriveOptions {
        model: base.model.clone(),
        stream: true,
    };
    eprintln!(
        "loadtest ramp: {} at factors {:?}, sims' time scale {time_scale}; output in {}",
        plan.description,
        a.factors,
        out.display()
    );
    let mut report = RampReport {
        command: crate::report::command_line(),
        date: chrono::Local::now()
            .format("%Y-%m-%d %H:%M:%S %z")
            .to_string(),
        workload: plan.description.clone(),
        time_scale,
        ttft_p99_ms: a.ttft_p99.as_secs_f64() * 1e3,
        max_failed: a.max_failed,
        steps: Vec::new(),
    };
    let multi = MultiProgress::new();
    let mut standing: Vec<&Arm> = arms.iter().collect();
    for &factor in &a.factors {
        if standing.is_empty() {
            break;
        }
        let args = step_args(base, factor, time_scale);
        let (plan, _, _) = build_plan(&args)?;
        let dir = out.join(format!("x{factor}"));
        let runner = fleet_runner(&args, time_scale, &dir, drive.clone())?;
        let span = plan.span().as_secs_f64();
        let offered = if span > 0.0 {
            plan.requests() as f64 / span
        } else {
            0.0
        };
        let mut next = Vec::new();
        for arm in standing {
            let result = runner
                .run_arm(Scenario::Steady, arm, &plan, &multi)
                .await
                .with_context(|| format!("{} at ×{factor}", arm.label))?;
            let s = &result.summary;
            let step = Step {
                arm: arm.label.clone(),
                factor,
                offered,
                modelled: offered * time_scale,
                achieved: s.req_per_s,
                requests: s.requests,
                failed: s.failed,
                hit_rate: s.hit_rate,
                ttft_p50_ms: s.ttft_ms.as_ref().map(|p| p.p50),
                ttft_p99_ms: s.ttft_ms.as_ref().map(|p| p.p99),
                held: holds(s, a.ttft_p99, a.max_failed),
            };
            eprintln!("ramp: {}", step_row(&step, None).join(" | "));
            if step.held {
                next.push(arm);
            }
            report.steps.push(step);
        }
        standing = next;
    }
    let text = tables(&report);
    write(&report, &text, &out)?;
    println!("{text}\nreport: {}", out.join("ramp.md").display());
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Percentiles;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        ramp: RampArgs,
    }

    fn parse(flags: &[&str]) -> RampArgs {
        Cmd::try_parse_from(std::iter::once("loadtest").chain(flags.iter().copied()))
            .unwrap()
            .ramp
    }

    #[test]
    fn a_step_scales_the_arrivals_and_pins_the_time_scale() {
        let a = parse(&["--speedup", "8", "--limit", "100"]);
        assert_eq!(a.factors, [1.0, 1.5, 2.0, 3.0, 4.0]);
        assert_eq!(a.ttft_p99, Duration::from_secs(2));
        let s = step_args(&a.run, 2.0, 0.125);
        assert_eq!(
            (s.speedup, s.time_scale, s.limit),
            (16.0, Some(0.125), Some(100))
        );
        let r = parse(&["--workload", "rag", "--rate", "3", "--factors", "1,4"]);
        let s = step_args(&r.run, 4.0, 1.0);
        assert_eq!((s.rate, s.speedup, s.time_scale), (12.0, 1.0, Some(1.0)));
    }

    fn summary(requests: usize, failed: usize, p99: Option<f64>) -> Summary {
        let mut s = crate::metrics::summarize(&[], &[]);
        s.requests = requests;
        s.failed = failed;
        s.ttft_ms = p99.map(|p99| Percentiles {
            p50: 1.0,
            p90: 1.0,
            p99,
        });
        s
    }

    #[test]
    fn a_step_holds_within_both_bounds() {
        let two = Duration::from_secs(2);
        assert!(holds(&summary(100, 0, Some(2000.0)), two, 0.0));
        assert!(!holds(&summary(100, 0, Some(2000.5)), two, 0.0));
        assert!(!holds(&summary(100, 1, Some(10.0)), two, 0.0));
        assert!(holds(&summary(100, 1, Some(10.0)), two, 0.01));
        assert!(!holds(&summary(100, 0, None), two, 0.0), "no TTFT");
        assert!(!holds(&summary(0, 0, Some(1.0)), two, 0.0), "nothing sent");
    }
}
