//! The run's report: `report.md`, `results.json` and SVG plots (hit rate
//! and TTFT p50 over time per scenario) in the output directory; and the
//! prefill/decode comparison's table (`pd_table`). Tables: `table` (the
//! comparison, answers under a fault, failures), `cpu_table`, `pd_table`;
//! `markdown` renders `report.md`, `plot` the SVGs.

mod cpu_table;
mod markdown;
mod pd_table;
mod plot;
mod table;

pub use cpu_table::cpu_table;
pub use markdown::render;
pub use pd_table::pd_table;
pub use plot::{LinePlot, Series, write_svg};
pub use table::{around_table, main_table};

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::machine::Machine;
use crate::metrics::Window;
use crate::runner::ArmResult;
use crate::scenario::Scenario;
use crate::workload::Plan;

/// The results of every arm in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// The scenario.
    pub scenario: Scenario,
    /// One result per arm, in the order run.
    pub arms: Vec<ArmResult>,
}

/// Everything a run reports.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The command line, shell-quoted.
    pub command: String,
    /// When it ran (local time).
    pub date: String,
    /// Where it ran.
    pub machine: Machine,
    /// The workload's description.
    pub workload: String,
    /// The settings, as (name, value).
    pub settings: Vec<(String, String)>,
    /// One entry per scenario.
    pub scenarios: Vec<ScenarioReport>,
}

/// The report of a run of `plan` ending now, on this machine, by this
/// process's command line.
pub fn report_now(
    plan: &Plan,
    settings: Vec<(String, String)>,
    scenarios: Vec<ScenarioReport>,
) -> RunReport {
    RunReport {
        command: command_line(),
        date: chrono::Local::now()
            .format("%Y-%m-%d %H:%M:%S %z")
            .to_string(),
        machine: Machine::detect(),
        workload: plan.description.clone(),
        settings,
        scenarios,
    }
}

/// `--out`, else `target/loadtest/<name prefix><date>`.
pub fn out_dir(out: Option<&std::path::Path>, prefix: &str) -> PathBuf {
    out.map(std::path::Path::to_path_buf).unwrap_or_else(|| {
        let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
        fleet::binaries::target_dir()
            .join("loadtest")
            .join(format!("{prefix}{stamp}"))
    })
}

/// The process's command line, shell-quoted.
pub fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// File names of a scenario's plots: (hit rate, TTFT).
pub fn plot_names(s: Scenario) -> (String, String) {
    (
        format!("hit_rate_{}.svg", s.name()),
        format!("ttft_{}.svg", s.name()),
    )
}

/// Writes `report.md`, `results.json` and the plots into `dir`; returns the
/// report's path.
pub fn write(r: &RunReport, dir: &Path, window_s: f64) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for s in &r.scenarios {
        let (hit, ttft) = plot_names(s.scenario);
        let event = s.arms.iter().find_map(|a| a.event.as_ref().map(|e| e.at_s));
        let mid = window_s / 2.0;
        // One line per arm: `value` of each window, at the window's middle.
        let series = |value: fn(&Window) -> Option<f64>| -> Vec<Series> {
            s.arms
                .iter()
                .map(|a| {
                    let pts = a
                        .windows
                        .iter()
                        .filter_map(|w| Some((w.start_s + mid, value(w)?)))
                        .collect();
                    (a.label.clone(), pts)
                })
                .collect()
        };
        let hits = series(|w| w.hit_rate.map(|h| h * 100.0));
        let ttfts = series(|w| w.ttft_p50_ms);
        let name = s.scenario.name();
        write_svg(
            &dir.join(hit),
            &LinePlot {
                title: &format!("Prefix-cache hit rate ({name}, {window_s} s windows)"),
                y_label: "hit rate (%)",
                series: &hits,
                event_s: event,
                y_max: Some(100.0),
            },
        )?;
        write_svg(
            &dir.join(ttft),
            &LinePlot {
                title: &format!("TTFT p50 ({name}, {window_s} s windows)"),
                y_label: "TTFT p50 (ms)",
                series: &ttfts,
                event_s: event,
                y_max: None,
            },
        )?;
    }
    let json = serde_json::to_string_pretty(r)?;
    std::fs::write(dir.join("results.json"), json)?;
    let path = dir.join("report.md");
    std::fs::write(&path, render(r)).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Sample, summarize, windows};
    use crate::runner::EventMark;

    #[test]
    fn writes_report_json_and_plots() {
        let samples: Vec<Sample> = (0..20)
            .map(|i| Sample {
                start_s: i as f64,
                end_s: i as f64 + 0.5,
                error: (i == 3).then(|| "HTTP 503: down".to_owned()),
                ttft_ms: Some(10.0 + i as f64),
                e2e_ms: 500.0,
                prompt_tokens: 64,
                cached_tokens: Some(if i > 5 { 48 } else { 0 }),
                completion_tokens: 4,
                worker: Some(format!("sim-{}", i % 2)),
                turn: 0,
            })
            .collect();
        let arm = ArmResult {
            label: "cache_aware ×2".into(),
            routers: 2,
            summary: summarize(&samples, &[]),
            windows: windows(&samples, 5.0),
            overhead: None,
            event: Some(EventMark {
                at_s: 10.0,
                what: "every router SIGKILLed".into(),
            }),
            around: Some(crate::metrics::around(&samples, 10.0, 60.0)),
            cpu: None,
            decision_p50_ms: None,
            log_dir: None,
            counters: None,
            by_turn: None,
            twins: None,
        };
        let r = RunReport {
            command: "loadtest run --scenario router-restart".into(),
            date: "2026-01-01 00:00".into(),
            machine: Machine::detect(),
            workload: "test".into(),
            settings: vec![("workers".into(), "2".into())],
            scenarios: vec![ScenarioReport {
                scenario: Scenario::RouterRestart,
                arms: vec![arm],
            }],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = write(&r, dir.path(), 5.0).unwrap();
        let md = std::fs::read_to_string(path).unwrap();
        assert!(md.contains("## Scenario: router-restart"));
        assert!(md.contains("at 10.0 s, every router SIGKILLed"));
        assert!(md.contains("| cache_aware ×2 | 2 | 20 | 1 |"));
        assert!(md.contains("hit_rate_router-restart.svg"));
        assert!(md.contains("1 × HTTP 503"));
        assert!(md.contains("## The `isolated` arm"));
        assert!(dir.path().join("ttft_router-restart.svg").is_file());
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("results.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(json["scenarios"][0]["arms"][0]["summary"]["failed"], 1);
    }
}
