//! One measured run: a fresh fleet for one arm (clean Valkey, fresh sims),
//! the calibration of the router overhead, the workload with the scenario's
//! event in the middle, CPU accounting, then the fleet is stopped. Or the
//! same against an already running fleet (`--target`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::calibrate::{self, Overhead};
use crate::client::Client;
use crate::drive::{DriveOptions, drive};
use crate::machine::cpu_ticks;
use crate::metrics::{
    AroundEvent, ByTurn, Sample, Summary, Window, around, by_turn, summarize, windows,
};
use crate::topology::{Arm, Fleet, FleetCounters, FleetSpec};

/// Width of each side of the before/after comparison around an event.
const AROUND_EVENT_S: f64 = 60.0;
use crate::scenario::{self, EventSettings, Scenario};
use crate::twins::{self, TwinCheck};
use crate::workload::Plan;
use fleet::process::proc_cpu_seconds;

/// When the scenario's event happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventMark {
    /// Seconds from the start of the run.
    pub at_s: f64,
    /// What was done (or why it failed).
    pub what: String,
}

/// CPU used during the workload, in % of one core.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuPercent {
    /// All routers together.
    pub routers: f64,
    /// The busiest router.
    pub router_max: f64,
    /// Valkey (every node of a cluster).
    pub valkey: f64,
    /// On a cluster: the primaries alone (the rest is the replicas').
    pub valkey_primaries: Option<f64>,
    /// On a cluster: the busiest primary's CPU over the mean primary's.
    pub valkey_spread: Option<f64>,
    /// All sims together.
    pub sims: f64,
    /// HAProxy (0 with the builtin balancer).
    pub balancer: f64,
    /// The load generator itself (with the builtin balancer, if used).
    pub loadtest: f64,
    /// The whole machine (every process, ours or not), % of all cores.
    pub machine: f64,
}

/// The mean over the series of summary `name`'s `quantile` in Prometheus
/// text (one series per router; NaN ones, of routers that recorded
/// nothing, left out).
pub fn quantile_mean(text: &str, name: &str, quantile: &str) -> Option<f64> {
    let want = format!("quantile=\"{quantile}\"");
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            (series.split('{').next()? == name && series.contains(want.as_str()))
                .then(|| value.parse::<f64>().ok())?
        })
        .filter(|v| v.is_finite())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// Everything measured for one arm in one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ArmResult {
    /// The arm's label.
    pub label: String,
    /// Router replicas.
    pub routers: usize,
    /// The measures.
    pub summary: Summary,
    /// The measures over time.
    pub windows: Vec<Window>,
    /// The router overhead, if calibrated.
    pub overhead: Option<Overhead>,
    /// The scenario's event.
    pub event: Option<EventMark>,
    /// The minute before the event against the minute after it.
    pub around: Option<AroundEvent>,
    /// CPU use, when the fleet was ours.
    pub cpu: Option<CpuPercent>,
    /// The routers' routing decision time, median (their own
    /// `prefix_router_route_seconds{quantile="0.5"}` at the end of the
    /// workload, a rolling window of about a minute; the mean over routers),
    /// ms; `None` for routers that do not export it.
    pub decision_p50_ms: Option<f64>,
    /// Logs of this run's processes, and its samples.
    pub log_dir: Option<PathBuf>,
    /// For an arm with sim roles: what the sims and routers counted during
    /// the workload.
    pub counters: Option<FleetCounters>,
    /// For a multi-turn workload: first turns against later ones.
    pub by_turn: Option<ByTurn>,
    /// For a scenario that stops workers: the answers it touched against
    /// their fault-free twins.
    pub twins: Option<TwinCheck>,
}

/// Settings shared by every run.
#[derive(Debug, Clone)]
pub struct Runner {
    /// The fleet; `arm` and `dir` are replaced per run.
    pub base: FleetSpec,
    /// How requests are sent.
    pub drive: DriveOptions,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// Calibration pairs (0: no calibration).
    pub calibration_pairs: usize,
    /// Width of the time-series windows, seconds.
    pub window_s: f64,
    /// The event's time, as a fraction of the plan's span.
    pub event_at: f64,
    /// How the event is carried out.
    pub event: EventSettings,
    /// Where logs go (`<out>/logs/<scenario>/<arm>`).
    pub out_dir: PathBuf,
}

/// A progress bar for `label` with `len` requests.
pub fn progress_bar(multi: &MultiProgress, label: &str, len: usize) -> ProgressBar {
    let bar = multi.add(ProgressBar::new(len as u64));
    let style = ProgressStyle::with_template(
        "{prefix:>32} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(label.to_owned());
    bar
}

/// `s` as a file name: letters, digits, `_` and `.`; other runs become `-`.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

impl Runner {
    /// Runs `plan` on a fresh fleet of `arm` under `scenario`.
    pub async fn run_arm(
        &self,
        scenario: Scenario,
        arm: &Arm,
        plan: &Plan,
        multi: &MultiProgress,
    ) -> anyhow::Result<ArmResult> {
        let dir = self
            .out_dir
            .join("logs")
            .join(scenario.name())
            .join(slug(&arm.label));
        let spec = FleetSpec {
            arm: arm.clone(),
            dir: dir.clone(),
            ..self.base.clone()
        };
        let bar = progress_bar(
            multi,
            &format!("{} {}", scenario.name(), arm.label),
            plan.requests(),
        );
        bar.set_message("starting the fleet");
        let mut fleet = Fleet::start(spec).await.with_context(|| {
            format!(
                "starting the fleet for {} (logs in {})",
                arm.label,
                dir.display()
            )
        })?;
        let routed = Client::new(&fleet.url(), self.request_timeout)?;
        bar.set_message("calibrating");
        let overhead = match fleet.sim_urls().first() {
            Some(sim) if self.calibration_pairs > 0 => {
                let direct = Client::new(sim, self.request_timeout)?;
                calibrate::measure(&direct, &routed, &self.drive.model, self.calibration_pairs)
                    .await
            }
            _ => None,
        };
        bar.set_message("");
        let workers = fleet.sim_ids();
        // Disaggregated arms (their counters), faults (migrations), and
        // LMCache arms (the CPU tier's hits).
        let counted =
            arm.sim_roles.is_some() || scenario.has_event() || self.base.lmcache_venv.is_some();
        let counters0 = match counted {
            true => Some(fleet.counters().await),
            false => None,
        };
        let cpu0 = fleet.cpu();
        let own0 = proc_cpu_seconds(std::process::id()).unwrap_or(0.0);
        let ticks0 = cpu_ticks();
        let event_at = plan.span().mul_f64(self.event_at.clamp(0.0, 1.0));
        let settings = self.event;
        let event = scenario.has_event().then(|| {
            let fleet = &mut fleet;
            (event_at, async move {
                scenario::apply(scenario, fleet, settings).await
            })
        });
        let driven = drive(plan, &routed, &self.drive, &bar, event).await;
        let cpu1 = fleet.cpu();
        let own1 = proc_cpu_seconds(std::process::id()).unwrap_or(0.0);
        let machine = match (ticks0, cpu_ticks()) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                100.0 * (b1 - b0) as f64 / (t1 - t0) as f64
            }
            _ => 0.0,
        };
        let counters = match counters0 {
            Some(before) => Some(fleet.counters().await.since(&before)),
            None => None,
        };
        let twins = match driven.exchanges.is_empty() {
            true => None,
            false => {
                bar.set_message("sending the twins");
                let stops: Vec<(String, f64)> = fleet
                    .stops()
                    .iter()
                    .map(|(w, at)| {
                        (
                            w.clone(),
                            at.saturating_duration_since(driven.started).as_secs_f64(),
                        )
                    })
                    .collect();
                let touched = twins::touched(&driven.samples, &stops);
                Some(twins::check(&routed, &driven.samples, &driven.exchanges, &touched).await)
            }
        };
        let decision_p50_ms = quantile_mean(
            &fleet.router_metrics().await,
            "prefix_router_route_seconds",
            "0.5",
        )
        .map(|s| s * 1000.0);
        fleet.stop().await;
        bar.finish();
        let summary = summarize(&driven.samples, &workers);
        let cpu = cpu1.since(&cpu0);
        let pct = |s: f64| {
            if summary.duration_s > 0.0 {
                100.0 * s / summary.duration_s
            } else {
                0.0
            }
        };
        save_samples(&dir, &driven.samples);
        let around_event = driven
            .event
            .as_ref()
            .map(|(at_s, _)| around(&driven.samples, *at_s, AROUND_EVENT_S));
        Ok(ArmResult {
            around: around_event,
            label: arm.label.clone(),
            routers: arm.routers,
            windows: windows(&driven.samples, self.window_s),
            overhead,
            event: driven.event.map(|(at_s, r)| EventMark {
                at_s,
                what: r.unwrap_or_else(|e| format!("FAILED: {e:#}")),
            }),
            cpu: Some(CpuPercent {
                routers: pct(cpu.routers_total()),
                router_max: pct(cpu.router_max()),
                valkey: pct(cpu.valkey),
                valkey_primaries: (!cpu.valkey_primaries.is_empty())
                    .then(|| pct(cpu.valkey_primaries.iter().sum())),
                valkey_spread: cpu.valkey_spread(),
                sims: pct(cpu.sims),
                balancer: pct(cpu.balancer),
                loadtest: pct(own1 - own0),
                machine,
            }),
            log_dir: Some(dir),
            decision_p50_ms,
            counters,
            by_turn: by_turn(&driven.samples),
            twins,
            summary,
        })
    }
}

/// Runs `plan` against a fleet already running at `url` (no event); with
/// `direct`, one of its workers, the overhead is calibrated too.
#[allow(clippy::too_many_arguments)]
pub async fn run_target(
    url: &str,
    direct: Option<&str>,
    plan: &Plan,
    drive_opts: &DriveOptions,
    request_timeout: Duration,
    calibration_pairs: usize,
    window_s: f64,
    multi: &MultiProgress,
) -> anyhow::Result<ArmResult> {
    let routed = Client::new(url, request_timeout)?;
    let overhead = match direct {
        Some(d) if calibration_pairs > 0 => {
            let direct = Client::new(d, request_timeout)?;
            calibrate::measure(&direct, &routed, &drive_opts.model, calibration_pairs).await
        }
        _ => None,
    };
    let bar = progress_bar(multi, url, plan.requests());
    let none: Option<(Duration, std::future::Ready<()>)> = None;
    let driven = drive(plan, &routed, drive_opts, &bar, none).await;
    bar.finish();
    let summary = summarize(&driven.samples, &[]);
    Ok(ArmResult {
        label: format!("target {url}"),
        routers: 0,
        windows: windows(&driven.samples, window_s),
        overhead,
        event: None,
        around: None,
        cpu: None,
        decision_p50_ms: None,
        log_dir: None,
        counters: None,
        by_turn: by_turn(&driven.samples),
        twins: None,
        summary,
    })
}

/// Writes the samples as JSON lines beside the logs (best effort).
fn save_samples(dir: &std::path::Path, samples: &[Sample]) {
    let mut text = String::new();
    for s in samples {
        if let Ok(line) = serde_json::to_string(s) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    if let Err(e) = std::fs::write(dir.join("samples.jsonl"), text) {
        eprintln!("loadtest: samples not saved in {}: {e}", dir.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(slug("cache_aware ×2"), "cache_aware-2");
        assert_eq!(slug("target http://x:1"), "target-http-x-1");
    }
}
