//! `loadtest run`: from the command line to the report. Builds the plan
//! once, then for each scenario runs every arm on a fresh fleet, one after
//! another, and writes `report.md`, `results.json` and the plots.

use std::path::PathBuf;

use anyhow::{Context, bail};
use indicatif::MultiProgress;

use crate::cli::RunArgs;
use crate::drive::DriveOptions;
use crate::peers;
use crate::report::{self, RunReport, ScenarioReport, around_table, main_table};
use crate::runner::{self, Runner};
use crate::scenario::{EventSettings, Scenario};
use crate::topology::{
    Arm, BalancerChoice, BalancerKind, ExternalRouter, FleetSpec, RouterCommon, SimSettings,
    default_tokenizer_dir,
};
use crate::workload::{
    Plan, SyntheticKind, SyntheticOptions, TraceOptions, synthetic_plan, trace_plan,
};
use fleet::binaries::{WorkspaceBinaries, system_program, workspace_root};

mod settings;
pub(crate) use settings::fleet_settings;
use settings::offered_load;

/// Tokens per sim KV block (the sims' default `--block-size`).
pub(crate) const SIM_BLOCK_TOKENS: usize = 16;
/// The internal token of every fleet the load test starts.
const TOKEN: &str = "loadtest-token";

/// Runs `loadtest run` with `args`; returns the report's path.
pub async fn run(args: RunArgs) -> anyhow::Result<PathBuf> {
    run_report(args).await.map(|(path, _)| path)
}

/// [`run`], returning the report itself too.
pub async fn run_report(args: RunArgs) -> anyhow::Result<(PathBuf, RunReport)> {
    let (plan, time_scale, input_cap) = build_plan(&args)?;
    if plan.requests() == 0 {
        bail!("the workload has no requests (check --requests, --duration, --limit)");
    }
    let out = report::out_dir(args.out.as_deref(), "");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let multi = MultiProgress::new();
    let drive = DriveOptions {
        model: args.model.clone(),
        stream: !args.no_stream,
    };
    if !(0.0..=1.0).contains(&args.event_at) {
        bail!("--event-at must be within 0..=1");
    }
    let window_s = args.window.as_secs_f64();
    if window_s <= 0.0 {
        bail!("--window must be positive");
    }
    eprintln!(
        "loadtest: {} ({} requests over {:.0} s); output in {}",
        plan.description,
        plan.requests(),
        plan.span().as_secs_f64(),
        out.display()
    );
    let mut settings = vec![
        (
            "offered load".to_owned(),
            offered_load(&plan, time_scale, args.capacity),
        ),
        ("stream".to_owned(), (!args.no_stream).to_string()),
        ("calibration pairs".into(), args.calibration.to_string()),
        ("window".into(), format!("{window_s} s")),
    ];
    let mut scenarios = Vec::new();
    if let Some(url) = &args.target {
        if args.scenario.iter().any(Scenario::has_event) {
            bail!("--target runs the steady scenario only (the fleet is not ours to kill)");
        }
        settings.push(("target".into(), url.clone()));
        let result = runner::run_target(
            url,
            args.direct.as_deref(),
            &plan,
            &drive,
            args.request_timeout,
            args.calibration,
            window_s,
            &multi,
        )
        .await?;
        scenarios.push(ScenarioReport {
            scenario: Scenario::Steady,
            arms: vec![result],
        });
    } else {
        let runner = fleet_runner(&args, time_scale, &out, drive)?;
        let arms = parse_arms(&args)?;
        settings.extend(fleet_settings(&args, &runner, time_scale, input_cap));
        for &scenario in &args.scenario {
            let mut results = Vec::new();
            for arm in &arms {
                match runner.run_arm(scenario, arm, &plan, &multi).await {
                    Ok(r) => results.push(r),
                    Err(e) => {
                        eprintln!(
                            "loadtest: {} / {} not measured: {e:#}",
                            scenario.name(),
                            arm.label
                        )
                    }
                }
            }
            if results.is_empty() {
                bail!("no arm of scenario {} could be run", scenario.name());
            }
            scenarios.push(ScenarioReport {
                scenario,
                arms: results,
            });
        }
    }
    let report = report::report_now(&plan, settings, scenarios);
    let path = report::write(&report, &out, window_s)?;
    for s in &report.scenarios {
        println!("\n## {}\n\n{}", s.scenario.name(), main_table(&s.arms));
        let around = around_table(&s.arms);
        if !around.is_empty() {
            println!("Before and after the event:\n\n{around}");
        }
    }
    println!("\nreport: {}", path.display());
    Ok((path, report))
}

/// The workload's plan, the sims' time scale, and the prompt cap applied.
pub(crate) fn build_plan(args: &RunArgs) -> anyhow::Result<(Plan, f64, Option<usize>)> {
    if args.workload == "trace" {
        let path = args.trace.clone().unwrap_or_else(|| {
            workspace_root().join("../shared/traces/mooncake_synthetic_trace.jsonl")
        });
        // A prompt (plus its answer) larger than one worker's pool is refused.
        let pool = args.num_blocks * SIM_BLOCK_TOKENS;
        let fit = pool.saturating_sub(args.max_output_tokens + SIM_BLOCK_TOKENS);
        if fit == 0 {
            bail!(
                "--num-blocks {} is too small for any prompt",
                args.num_blocks
            );
        }
        let cap = Some(args.max_input_tokens.unwrap_or(fit).min(fit));
        let opts = TraceOptions {
            offset: args.trace_offset,
            limit: args.limit,
            speedup: args.speedup,
            max_output_tokens: args.max_output_tokens,
            max_input_tokens: cap,
            text: args.trace_text,
        };
        let plan = trace_plan(&path, &opts)?;
        Ok((plan, args.time_scale.unwrap_or(1.0 / args.speedup), cap))
    } else {
        let kind: SyntheticKind = args.workload.parse().map_err(anyhow::Error::msg)?;
        let o = SyntheticOptions {
            kind,
            api: args.api,
            rate: args.rate,
            duration: Some(args.duration),
            requests: args.requests,
            seed: args.seed,
            output_tokens: args.output_tokens,
            documents: args.documents,
            doc_words: args.doc_words,
            zipf: args.zipf,
            question_words: args.question_words,
            system_words: args.system_words,
            turns: args.turns,
            think_time: args.think_time,
        };
        Ok((synthetic_plan(&o)?, args.time_scale.unwrap_or(1.0), None))
    }
}

/// The arms `--policies` names.
pub(crate) fn parse_arms(args: &RunArgs) -> anyhow::Result<Vec<Arm>> {
    let peers = args
        .peers
        .iter()
        .map(|p| peer_router(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let variants = parse_variants(&args.variants)?;
    let arms = args
        .policies
        .iter()
        .map(|spec| {
            let mut names = spec.split('+');
            let base = names.next().unwrap_or_default();
            let mut arm = Arm::parse(base, args.routers, args.isolated_ttl, &peers)?;
            for name in names {
                let flags = variants
                    .get(name.trim())
                    .with_context(|| format!("arm {spec:?}: no --variant named {name:?}"))?;
                if !matches!(arm.kind, crate::topology::RouterKind::PrefixRouter { .. }) {
                    bail!("arm {spec:?}: variants apply to prefix-router arms only");
                }
                arm.router_args.extend(flags.iter().cloned());
                arm.label = format!("{} +{}", arm.label, name.trim());
            }
            Ok(arm)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if arms.is_empty() {
        bail!("--policies is empty");
    }
    Ok(arms)
}

/// `--variant NAME=FLAG` uses, grouped by name in the given order.
fn parse_variants(
    specs: &[String],
) -> anyhow::Result<std::collections::BTreeMap<String, Vec<String>>> {
    let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
    for spec in specs {
        let (name, flag) = spec
            .split_once('=')
            .filter(|(n, f)| !n.trim().is_empty() && !f.is_empty())
            .with_context(|| format!("--variant {spec:?}: expected NAME=FLAG"))?;
        out.entry(name.trim().to_owned())
            .or_default()
            .push(flag.to_owned());
    }
    Ok(out)
}

/// The runner of launched fleets (its `base.arm` is a placeholder: each
/// run names its arm).
pub(crate) fn fleet_runner(
    args: &RunArgs,
    time_scale: f64,
    out: &std::path::Path,
    drive: DriveOptions,
) -> anyhow::Result<Runner> {
    if args.routers == 0 || args.workers == 0 {
        bail!("--routers and --workers must be positive");
    }
    if !(time_scale.is_finite() && time_scale > 0.0) {
        bail!("--time-scale must be a positive number");
    }
    let placeholder = Arm::parse("cache_aware", args.routers, args.isolated_ttl, &[])?;
    let bins =
        WorkspaceBinaries::locate(args.router_bin.clone(), args.sim_bin.clone(), &args.profile)?;
    let valkey = system_program(
        args.valkey_bin.clone(),
        "valkey-server",
        "run scripts/install-deps.sh",
    )?;
    let balancer = match args.balancer {
        BalancerChoice::Haproxy => BalancerKind::Haproxy(system_program(
            args.haproxy_bin.clone(),
            "haproxy",
            "run scripts/install-deps.sh, or pass --balancer builtin",
        )?),
        BalancerChoice::Builtin => BalancerKind::Builtin,
    };
    let tokenizer_dir = args
        .tokenizer_dir
        .clone()
        .unwrap_or_else(default_tokenizer_dir);
    if !tokenizer_dir.join("tokenizer.json").is_file() {
        bail!(
            "no tokenizer.json in {} (pass --tokenizer-dir)",
            tokenizer_dir.display()
        );
    }
    let keep_data = args.valkey_restart == "aof";
    let lmcache_venv = match args.lmcache {
        false => None,
        true => Some(
            fleet::lmcache::lmcache_venv(args.lmcache_venv.as_deref()).with_context(|| {
                "--lmcache: no LMCache venv found (--lmcache-venv, $LMCACHE_VENV or \
                 target/lmcache-venv); run scripts/lmcache-test.sh once to build it"
            })?,
        ),
    };
    let base = FleetSpec {
        lmcache_venv,
        arm: placeholder,
        routers: RouterCommon {
            program: bins.router,
            token: TOKEN.into(),
            extra_args: args.router_args.clone(),
            log_level: "warn".into(),
        },
        sim_program: bins.sim,
        sims: SimSettings {
            count: args.workers,
            num_blocks: args.num_blocks,
            time_scale,
            max_num_seqs: args.max_num_seqs,
            extra_args: args.sim_args.clone(),
        },
        valkey_program: valkey,
        valkey_aof: keep_data,
        valkey_cluster: args.valkey_cluster,
        balancer,
        model: args.model.clone(),
        tokenizer_dir,
        dir: out.join("logs"),
    };
    let runner = Runner {
        base,
        drive,
        request_timeout: args.request_timeout,
        calibration_pairs: args.calibration,
        window_s: args.window.as_secs_f64(),
        event_at: args.event_at,
        event: EventSettings {
            down_for: args.down_for,
            valkey_keeps_data: keep_data,
        },
        out_dir: out.to_owned(),
    };
    Ok(runner)
}

/// A `--peer` spec: `NAME=COMMAND`, or just the name of a known peer
/// (`sglang-router`, `vllm-router`, `vllm-router-kv`, `smg`, `dynamo`),
/// which installs its pinned version into `target/peers/` if needed and
/// runs it as `peers::external_router` says (see `loadtest/peers/README.md`).
fn peer_router(spec: &str) -> anyhow::Result<ExternalRouter> {
    if spec.contains('=') {
        return ExternalRouter::parse(spec);
    }
    let kind: peers::PeerKind = spec.parse()?;
    if kind == peers::PeerKind::Dynamo {
        peers::check_private_network()?;
    }
    let root = workspace_root().join("target").join("peers");
    let install = peers::install(kind, &root)
        .with_context(|| format!("installing {kind} into {}", root.display()))?;
    let me = std::env::current_exe().context("locating the loadtest binary")?;
    peers::external_router(&install, &me)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn run_args(argv: &[&str]) -> RunArgs {
        let mut all = vec!["loadtest", "run"];
        all.extend_from_slice(argv);
        match Cli::try_parse_from(all).expect("parses").command {
            Command::Run(a) => *a,
            _ => panic!("not run"),
        }
    }

    #[test]
    fn variants_give_their_flags_to_the_arms_that_name_them() {
        let args = run_args(&[
            "--policies",
            "cache_aware:4,cache_aware:4+flow,round_robin+flow+x",
            "--variant",
            "flow=--max-in-flight-per-worker=64",
            "--variant",
            "flow=--queue-timeout=5s",
            "--variant",
            "x=--foo",
        ]);
        let arms = parse_arms(&args).expect("arms");
        assert!(arms[0].router_args.is_empty());
        assert_eq!(
            arms[1].router_args,
            ["--max-in-flight-per-worker=64", "--queue-timeout=5s"]
        );
        assert_eq!(arms[1].label, "cache_aware ×4 +flow");
        assert_eq!(arms[2].router_args.len(), 3);
        assert_eq!(arms[2].routers, 2);
    }

    #[test]
    fn an_unknown_or_malformed_variant_is_an_error() {
        let args = run_args(&["--policies", "cache_aware+nope"]);
        assert!(parse_arms(&args).is_err());
        let args = run_args(&["--policies", "cache_aware", "--variant", "noflag"]);
        assert!(parse_arms(&args).is_err());
    }
}
