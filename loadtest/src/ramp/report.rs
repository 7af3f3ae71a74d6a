//! What a ramp found, and how it is written: each arm's steps, its
//! capacity (the last step that held), `ramp.md`'s tables and `ramp.json`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

/// One arm at one load factor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// The arm's label.
    pub arm: String,
    /// The load factor.
    pub factor: f64,
    /// Offered requests/s (the plan's requests over its span).
    pub offered: f64,
    /// The same rate onto engines at real time (offered × time scale).
    pub modelled: f64,
    /// Completed requests/s.
    pub achieved: f64,
    /// Requests sent.
    pub requests: usize,
    /// Of those, failed.
    pub failed: usize,
    /// Cached prompt tokens over prompt tokens.
    pub hit_rate: Option<f64>,
    /// TTFT p50, ms.
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
    /// Whether the step held (TTFT p99 and failures within bounds).
    pub held: bool,
}

/// What a ramp found.
#[derive(Debug, Clone, Serialize)]
pub struct RampReport {
    /// The command line.
    pub command: String,
    /// When it ran (local time).
    pub date: String,
    /// The workload at factor 1.
    pub workload: String,
    /// The sims' time scale, every step.
    pub time_scale: f64,
    /// The TTFT p99 bound, ms.
    pub ttft_p99_ms: f64,
    /// The failed-request bound, a fraction.
    pub max_failed: f64,
    /// Every step, in the order run.
    pub steps: Vec<Step>,
}

impl RampReport {
    /// The arms, in the order they first ran.
    pub fn arms(&self) -> Vec<&str> {
        let mut arms: Vec<&str> = Vec::new();
        for s in &self.steps {
            if !arms.contains(&s.arm.as_str()) {
                arms.push(&s.arm);
            }
        }
        arms
    }

    /// `arm`'s capacity: its last step that held before the first that did
    /// not (None if its first step did not hold).
    pub fn capacity(&self, arm: &str) -> Option<&Step> {
        self.steps
            .iter()
            .filter(|s| s.arm == arm)
            .take_while(|s| s.held)
            .last()
    }
}

pub(super) fn write(report: &RampReport, text: &str, out: &Path) -> anyhow::Result<PathBuf> {
    let json = serde_json::to_string_pretty(report).context("serializing the ramp")?;
    std::fs::write(out.join("ramp.json"), json).context("writing ramp.json")?;
    let path = out.join("ramp.md");
    let md = format!(
        "# Capacity ramp\n\n`{}`\n\n{}; sims' time scale {}; a step holds while TTFT p99 ≤ {:.0} ms and at most {:.1}% of requests fail.\n\n{text}",
        report.command,
        report.workload,
        report.time_scale,
        report.ttft_p99_ms,
        report.max_failed * 100.0
    );
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

pub(super) fn step_row(s: &Step, capacity: Option<f64>) -> Vec<String> {
    let ms = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.0}"));
    vec![
        s.arm.clone(),
        format!("×{}", s.factor),
        format!("{:.2}", s.offered),
        format!("{:.2}", s.modelled),
        capacity
            .filter(|c| *c > 0.0)
            .map_or("-".into(), |c| format!("{:.0}%", 100.0 * s.offered / c)),
        format!("{:.2}", s.achieved),
        format!("{}/{}", s.failed, s.requests),
        s.hit_rate
            .map_or("-".into(), |h| format!("{:.1}%", 100.0 * h)),
        format!("{} / {}", ms(s.ttft_p50_ms), ms(s.ttft_p99_ms)),
        if s.held { "held" } else { "broke" }.into(),
    ]
}

/// The capacities side by side, then every step.
pub fn tables(r: &RampReport) -> String {
    let mut out = String::from(
        "| arm | capacity req/s | at real time req/s | load factor | next step's TTFT p99 ms |\n|---|---:|---:|---:|---:|\n",
    );
    for arm in r.arms() {
        let cap = r.capacity(arm);
        let broke = r.steps.iter().find(|s| s.arm == arm && !s.held);
        let _ = writeln!(
            out,
            "| {arm} | {} | {} | {} | {} |",
            cap.map_or("below the first step".into(), |c| format!(
                "{:.2}",
                c.offered
            )),
            cap.map_or("-".into(), |c| format!("{:.2}", c.modelled)),
            cap.map_or("-".into(), |c| format!("×{}", c.factor)),
            match broke {
                Some(b) => b
                    .ttft_p99_ms
                    .map_or("- (no TTFT)".into(), |v| format!("{v:.0} (×{})", b.factor)),
                None => "not reached".into(),
            }
        );
    }
    out.push_str(
        "\n| arm | load | offered req/s | at real time req/s | of capacity | completed req/s | failed | hit rate | TTFT p50 / p99 ms | |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for s in &r.steps {
        let cap = r.capacity(&s.arm).map(|c| c.offered);
        let _ = writeln!(out, "| {} |", step_row(s, cap).join(" | "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(arm: &str, factor: f64, held: bool) -> Step {
        Step {
            arm: arm.into(),
            factor,
            offered: 10.0 * factor,
            modelled: 1.25 * factor,
            achieved: 10.0 * factor,
            requests: 100,
            failed: 0,
            hit_rate: Some(0.5),
            ttft_p50_ms: Some(100.0),
            ttft_p99_ms: Some(if held { 1500.0 } else { 2500.0 }),
            held,
        }
    }

    #[test]
    fn capacity_is_the_last_step_that_held() {
        let r = RampReport {
            command: "loadtest ramp".into(),
            date: String::new(),
            workload: "w".into(),
            time_scale: 0.125,
            ttft_p99_ms: 2000.0,
            max_failed: 0.0,
            steps: vec![
                step("cache_aware ×4", 1.0, true),
                step("round_robin ×4", 1.0, true),
                step("cache_aware ×4", 2.0, true),
                step("round_robin ×4", 2.0, false),
                step("cache_aware ×4", 3.0, false),
                step("least_loaded ×4", 1.0, false),
            ],
        };
        assert_eq!(
            r.arms(),
            ["cache_aware ×4", "round_robin ×4", "least_loaded ×4"]
        );
        assert_eq!(r.capacity("cache_aware ×4").map(|s| s.factor), Some(2.0));
        assert_eq!(r.capacity("round_robin ×4").map(|s| s.factor), Some(1.0));
        assert_eq!(r.capacity("least_loaded ×4"), None);
        let t = tables(&r);
        assert!(
            t.contains("| cache_aware ×4 | 20.00 | 2.50 | ×2 | 2500 (×3) |"),
            "{t}"
        );
        assert!(
            t.contains("| least_loaded ×4 | below the first step |"),
            "{t}"
        );
        // Each step's offered rate against its arm's capacity.
        assert!(
            t.contains("| round_robin ×4 | ×2 | 20.00 | 2.50 | 200% | 20.00 | 0/100 | 50.0% | 100 / 2500 | broke |"),
            "{t}"
        );
    }
}
