//! `loadtest pd`: prefill/decode disaggregation (issue 14) against colocated
//! workers, on one multi-turn chat or RAG workload. Each arm runs on a fresh
//! fleet, as `loadtest run` does, with the same number of sims: all `both`
//! (colocated, cache-aware), or prefill and decode sims behind routers whose
//! prefill pick follows locality or load alone, skipping the prefill when
//! the decode worker holds the prompt, or never. `pd.md` holds the
//! comparison's table (`report::pd_table`), `report.md` everything else.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use indicatif::MultiProgress;

use crate::cli::RunArgs;
use crate::drive::DriveOptions;
use crate::report::{self, ScenarioReport, main_table, out_dir, pd_table, report_now};
use crate::run::{build_plan, fleet_runner, fleet_settings};
use crate::scenario::Scenario;
use crate::topology::Arm;
use protocol::WorkerRole;

/// The arms `loadtest pd` knows, in their default order.
pub const PD_ARMS: &[&str] = &["colocated", "pd", "pd-load", "pd-noskip", "pd-load-noskip"];

/// `loadtest pd`: the `run` flags (workload, rates, sims, routers, output),
/// and the P/D arms' shape.
#[derive(Args, Debug, Clone)]
pub struct PdArgs {
    /// The workload and fleet, as for `loadtest run` (`--workload chat` or
    /// `rag`; `--policies` and `--workers` are replaced by the arms).
    #[command(flatten)]
    pub run: RunArgs,
    /// Prefill sims of a P/D arm.
    #[arg(long, default_value_t = 2, help_heading = "P/D")]
    pub prefill_workers: usize,
    /// Decode sims of a P/D arm (a colocated arm has as many sims as a P/D
    /// arm in all).
    #[arg(long, default_value_t = 2, help_heading = "P/D")]
    pub decode_workers: usize,
    /// Arms, comma-separated: colocated (cache-aware, every sim `both`),
    /// pd (locality-aware prefill, skip when the decode worker holds the
    /// prompt), pd-load (prefill by load alone), pd-noskip (never skip),
    /// pd-load-noskip.
    #[arg(
        long = "arms",
        value_delimiter = ',',
        default_value = "colocated,pd,pd-load,pd-noskip,pd-load-noskip",
        help_heading = "P/D"
    )]
    pub arms: Vec<String>,
}

/// The arm `name` of [`PD_ARMS`], with `routers` replicas.
pub fn pd_arm(name: &str, routers: usize, prefill: usize, decode: usize) -> anyhow::Result<Arm> {
    let mut arm = Arm::parse("cache_aware", routers, Duration::ZERO, &[])?;
    let split = [
        vec![WorkerRole::Prefill; prefill],
        vec![WorkerRole::Decode; decode],
    ]
    .concat();
    let load = ["--pd-prefill-policy", "least_loaded"];
    let noskip = ["--pd-skip-prefill-share", "1"];
    let (roles, flags, what): (Vec<WorkerRole>, Vec<&str>, String) = match name {
        "colocated" => (
            vec![WorkerRole::Both; prefill + decode],
            vec![],
            format!("{} both", prefill + decode),
        ),
        "pd" => (split, vec![], format!("{prefill}P+{decode}D")),
        "pd-load" => (
            split,
            load.to_vec(),
            format!("{prefill}P+{decode}D, prefill by load"),
        ),
        "pd-noskip" => (
            split,
            noskip.to_vec(),
            format!("{prefill}P+{decode}D, never skip"),
        ),
        "pd-load-noskip" => (
            split,
            [load, noskip].concat(),
            format!("{prefill}P+{decode}D, prefill by load, never skip"),
        ),
        _ => bail!(
            "unknown P/D arm {name:?}: expected one of {}",
            PD_ARMS.join(", ")
        ),
    };
    arm.label = format!("{name} ({what}) ×{routers}");
    arm.router_args = flags.into_iter().map(String::from).collect();
    arm.sim_roles = Some(roles);
    Ok(arm)
}

/// Runs `loadtest pd`; returns the path of `pd.md`.
pub async fn pd(args: PdArgs) -> anyhow::Result<PathBuf> {
    let run = &args.run;
    if !matches!(run.workload.as_str(), "chat" | "rag") {
        bail!(
            "loadtest pd compares on --workload chat or rag, not {:?}",
            run.workload
        );
    }
    if args.prefill_workers == 0 || args.decode_workers == 0 {
        bail!("--prefill-workers and --decode-workers must be positive");
    }
    let arms = args
        .arms
        .iter()
        .map(|a| {
            pd_arm(
                a.trim(),
                run.routers,
                args.prefill_workers,
                args.decode_workers,
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (plan, time_scale, input_cap) = build_plan(run)?;
    if plan.requests() == 0 {
        bail!("the workload has no requests (check --requests, --duration)");
    }
    let out = out_dir(run.out.as_deref(), "pd-");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let drive = DriveOptions {
        model: run.model.clone(),
        stream: !run.no_stream,
    };
    let window_s = run.window.as_secs_f64();
    if window_s <= 0.0 {
        bail!("--window must be positive");
    }
    eprintln!(
        "loadtest pd: {} ({} requests over {:.0} s); output in {}",
        plan.description,
        plan.requests(),
        plan.span().as_secs_f64(),
        out.display()
    );
    let runner = fleet_runner(run, time_scale, &out, drive)?;
    let mut settings = vec![
        ("stream".to_owned(), (!run.no_stream).to_string()),
        ("calibration pairs".into(), run.calibration.to_string()),
        ("window".into(), format!("{window_s} s")),
    ];
    settings.extend(
        fleet_settings(run, &runner, time_scale, input_cap)
            .into_iter()
            .filter(|(k, _)| k != "workers"),
    );
    settings.push((
        "sims per arm".into(),
        format!(
            "{} ({} prefill + {} decode, or as many both)",
            args.prefill_workers + args.decode_workers,
            args.prefill_workers,
            args.decode_workers
        ),
    ));
    let multi = MultiProgress::new();
    let mut results = Vec::new();
    for arm in &arms {
        match runner.run_arm(Scenario::Steady, arm, &plan, &multi).await {
            Ok(r) => results.push(r),
            Err(e) => eprintln!("loadtest pd: {} not measured: {e:#}", arm.label),
        }
    }
    if results.is_empty() {
        bail!("no arm could be run");
    }
    let table = pd_table(&results);
    let steady = ScenarioReport {
        scenario: Scenario::Steady,
        arms: results,
    };
    let report = report_now(&plan, settings, vec![steady]);
    report::write(&report, &out, window_s)?;
    let text = format!(
        "# Prefill/decode disaggregation against colocated workers\n\n\
         `{}`\n\n{} · {}\n\n{}\n\n{table}\n{PD_NOTES}\n\
         The command's full report (machine, settings, CPU, plots): \
         [report.md](report.md).\n",
        report.command,
        report.date,
        report.workload,
        report.machine.summary()
    );
    let path = out.join("pd.md");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    println!("\n{}\n\n{table}", main_table(&report.scenarios[0].arms));
    println!("\nreport: {}", path.display());
    Ok(path)
}

/// How `pd.md`'s columns are measured.
const PD_NOTES: &str = "\
* TTFT: from sending to the first content chunk, over successful requests; \
  TPOT: (end to end − TTFT) / (output tokens − 1), per streamed request.
* First and later turns: a chat session's first request against its later \
  ones (which resend the earlier turns and answers).
* Hit rate (answers): the cached tokens the answering worker reported \
  (`x-sim-cached-tokens`): in a P/D arm, the decode worker's own cache.
* Each role's hit rate: Σ `vllm:prefix_cache_hits` / Σ \
  `vllm:prefix_cache_queries` of the sims of that role, counted during the \
  workload (a decode worker's pulled KV is not a hit).
* Prefill skipped, decode alone: shares of the routers' \
  `prefix_router_pd_requests_total{path}` (`skip_prefill`, `decode_only`; \
  the rest is `disaggregated`).
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms_set_roles_and_router_flags() {
        let a = pd_arm("colocated", 2, 2, 2).unwrap();
        assert_eq!(a.sim_roles, Some(vec![WorkerRole::Both; 4]));
        assert!(a.router_args.is_empty());
        assert_eq!(a.label, "colocated (4 both) ×2");
        let a = pd_arm("pd-load-noskip", 1, 2, 3).unwrap();
        let roles = a.sim_roles.unwrap();
        assert_eq!(roles.len(), 5);
        assert_eq!(roles[1], WorkerRole::Prefill);
        assert_eq!(roles[2], WorkerRole::Decode);
        assert_eq!(
            a.router_args,
            [
                "--pd-prefill-policy",
                "least_loaded",
                "--pd-skip-prefill-share",
                "1"
            ]
        );
        assert!(pd_arm("pd-fast", 1, 1, 1).is_err());
    }
}
