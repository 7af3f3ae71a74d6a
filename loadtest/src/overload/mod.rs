//! `loadtest overload` (issue 28): classes (objective, priority, offered
//! share) and tenants (weight, offered share) sent through one fleet at
//! half, then twice, the rate it serves, with flow control off and on as
//! side-by-side arms on fresh fleets. Per arm, phase, class and tenant:
//! requests sent, served, shed (429/503 with their reason) and failed, TTFT
//! p50/p99; per phase, Jain's fairness index over the tenants' served
//! requests per unit of weight. Sims must share their compute
//! (`--sim-arg=--prefill --sim-arg=serial`), or nothing ever queues.
//!
//! * `parts`: the class and tenant specs, Jain's index, the routers' config.
//! * `bound`: the floor an ideal scheduler gives the top class (the report
//!   prints it beside the measured ratio).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

use crate::cli::RunArgs;
use crate::client::{Client, Outcome, completion_body};
use crate::metrics::nearest_rank;
use crate::report::out_dir;
use crate::run::fleet_runner;
use crate::topology::{Arm, Fleet, sum_f64, sum_where};
use crate::workload::Api;
use parts::{Part, jain, parse_parts, pick, router_config, top_class};

mod bound;
mod parts;

/// The fleet's capacity in requests/s when `--capacity` is not given.
pub const DEFAULT_CAPACITY: f64 = 10.0;

/// The header the fleet takes tenants from in this test.
const TENANT_HEADER: &str = "x-loadtest-tenant";
/// The objective header of the Gateway API Inference Extension.
const OBJECTIVE_HEADER: &str = "x-gateway-inference-objective";

/// `loadtest overload`: the `run` flags (fleet, binaries, output) and the
/// classes, tenants and rates.
#[derive(Args, Debug, Clone)]
pub struct OverloadArgs {
    /// The fleet, as for `loadtest run` (`--routers`, `--workers`,
    /// `--sim-arg`, `--time-scale`, ...; the workload flags are unused).
    /// Its `--capacity` is the requests per second the fleet serves: the
    /// phases offer half and twice it (default [`DEFAULT_CAPACITY`]).
    #[command(flatten)]
    pub run: RunArgs,
    /// A class `NAME=PRIORITY:SHARE` (repeatable): its objective name, its
    /// priority (negative: sheddable) and its share of the offered requests.
    /// By default interactive traffic is a tenth: at 2x it is a fifth of
    /// the capacity, so the overload is the others' (with 30% it alone is
    /// 60% of the capacity at 2x, and even an ideal scheduler nearly
    /// doubles its p99; the report prints that floor for the given shares).
    #[arg(long = "class", help_heading = "Overload",
          default_values_t = ["interactive=10:0.1".to_owned(), "standard=0:0.6".to_owned(), "batch=-1:0.3".to_owned()])]
    pub classes: Vec<String>,
    /// A tenant `NAME=WEIGHT:SHARE` (repeatable): its weight and its share
    /// of the offered requests.
    #[arg(long = "tenant", help_heading = "Overload",
          default_values_t = ["a=1:0.9".to_owned(), "b=1:0.1".to_owned()])]
    pub tenants: Vec<String>,
    /// Length of each phase.
    #[arg(long, default_value = "30s", value_parser = protocol::parse_duration, help_heading = "Overload")]
    pub phase: Duration,
    /// Prompt length, in words (each request's own, so nothing is cached).
    #[arg(long, default_value_t = 400, help_heading = "Overload")]
    pub prompt_words: usize,
    /// Tokens each answer generates.
    #[arg(long, default_value_t = 8, help_heading = "Overload")]
    pub max_tokens: u32,
    /// Flags of the arm with flow control (the other arm has none).
    #[arg(long = "flow-arg", allow_hyphen_values = true, help_heading = "Overload",
          default_values_t = ["--max-in-flight-per-worker".to_owned(), "4".to_owned(), "--queue-timeout".to_owned(), "20s".to_owned()])]
    pub flow_args: Vec<String>,
}

/// One request's class, tenant and what it gave.
struct Sent {
    class: usize,
    tenant: usize,
    outcome: Outcome,
}

/// What a phase offers: `rate` requests per second for `span`, numbered
/// from `first`.
struct Offer {
    rate: f64,
    span: Duration,
    /// The number of the phase's first prompt: each prompt of an arm is
    /// new (the 2x phase once began with the half phase's prompts again,
    /// cache hits that saturated nothing: its first half second went
    /// straight to routing).
    first: u64,
}

/// Offers `offer.rate` requests per second for `offer.span`, as a Poisson
/// process.
async fn phase(
    client: &Client,
    model: &str,
    args: &OverloadArgs,
    classes: &[Part],
    tenants: &[Part],
    offer: Offer,
) -> Vec<Sent> {
    let Offer { rate, span, first } = offer;
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut at = Duration::ZERO;
    let mut n = first;
    while at < span {
        let u: f64 = rand::random();
        at += Duration::from_secs_f64(-(1.0 - u).ln() / rate);
        tokio::time::sleep_until((start + at).into()).await;
        let (class, tenant) = (pick(classes, rand::random()), pick(tenants, rand::random()));
        let words: Vec<String> = (0..args.prompt_words)
            .map(|i| format!("w{}", (n * 7919 + i as u64 * 104_729) % 50_000))
            .collect();
        n += 1;
        let prompt = format!("{n} {}", words.join(" "));
        let body = completion_body(model, json!(prompt), args.max_tokens, true);
        let headers = vec![
            (OBJECTIVE_HEADER.to_owned(), classes[class].name.clone()),
            (TENANT_HEADER.to_owned(), tenants[tenant].name.clone()),
        ];
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = client.send_with(Api::Completions, &body, &headers).await;
            Sent {
                class,
                tenant,
                outcome,
            }
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        if let Ok(s) = t.await {
            out.push(s);
        }
    }
    out
}

/// Counts, TTFTs and the mean time waited in the routers (`waited_s`:
/// the seconds the routers recorded for them) of a set of requests.
fn row(sent: &[&Sent], waited_s: f64) -> String {
    let served: Vec<&&Sent> = sent.iter().filter(|s| s.outcome.ok()).collect();
    let status = |code: u16| {
        sent.iter()
            .filter(|s| s.outcome.status == Some(code))
            .count()
    };
    let failed = sent.len() - served.len() - status(429) - status(503);
    let ttft = ttft_ms(sent);
    let q = |p: f64| {
        if ttft.is_empty() {
            "-".to_owned()
        } else {
            format!("{:.0}", nearest_rank(&ttft, p))
        }
    };
    format!(
        "{} | {} | {} | {} | {} | {:.0} | {} | {}",
        sent.len(),
        served.len(),
        status(429),
        status(503),
        failed,
        1000.0 * waited_s / sent.len().max(1) as f64,
        q(0.5),
        q(0.99)
    )
}

/// The served requests' TTFTs in ms, sorted.
fn ttft_ms(sent: &[&Sent]) -> Vec<f64> {
    let mut ttft: Vec<f64> = sent
        .iter()
        .filter(|s| s.outcome.ok())
        .filter_map(|s| s.outcome.ttft.map(|t| t.as_secs_f64() * 1000.0))
        .collect();
    ttft.sort_by(f64::total_cmp);
    ttft
}

/// The target's line: the highest-priority class's TTFT p99 at half load
/// and at 2x per arm (`p99s`: arm, phase, ms), its ratio, and the floor an
/// ideal scheduler gives for the same classes (`bound`).
fn target_line(
    classes: &[Part],
    workers: usize,
    capacity: f64,
    p99s: &[(&str, &str, f64)],
) -> String {
    let Some(top) = top_class(classes).map(|i| &classes[i]) else {
        return String::new();
    };
    let mut s = format!(
        "\nClass {} (priority {}), TTFT p99 at 2x over its p99 at half load (target: at most 1.5 with flow control):",
        top.name, top.number
    );
    for arm in ["off", "on"] {
        let at = |phase: &str| {
            p99s.iter()
                .find(|(a, p, _)| *a == arm && *p == phase)
                .map(|(_, _, ms)| *ms)
        };
        if let (Some(half), Some(over)) = (at("half"), at("2x")) {
            let _ = write!(
                s,
                " flow control {arm}: {half:.0} -> {over:.0} ms, **{:.2}x**;",
                over / half
            );
        }
    }
    if let Some(f) = bound::floor(classes, workers, capacity) {
        let _ = write!(
            s,
            " an ideal fleet-wide scheduler with these shares (serial prefills of {:.0} ms, none preempted): {:.0} -> {:.0} ms, {:.2}x.",
            1000.0 * workers as f64 / capacity,
            1000.0 * f.half_p99,
            1000.0 * f.over_p99,
            f.ratio()
        );
    }
    s.push('\n');
    s
}

/// Runs `loadtest overload`; returns the path of `overload.md`.
pub async fn overload(args: OverloadArgs) -> anyhow::Result<PathBuf> {
    let classes = parse_parts(&args.classes, "class")?;
    let tenants = parse_parts(&args.tenants, "tenant")?;
    let run = &args.run;
    let capacity = run.capacity.unwrap_or(DEFAULT_CAPACITY);
    if capacity.is_nan() || capacity <= 0.0 {
        bail!("--capacity must be positive");
    }
    let out = out_dir(run.out.as_deref(), "overload-");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let config = out.join("router.toml");
    std::fs::write(&config, router_config(&classes, &tenants))
        .with_context(|| format!("writing {}", config.display()))?;
    let drive = crate::drive::DriveOptions {
        model: run.model.clone(),
        stream: true,
    };
    let time_scale = run.time_scale.unwrap_or(1.0);
    let runner = Arc::new(fleet_runner(run, time_scale, &out, drive)?);
    let mut md = format!(
        "# Overload: flow control off and on\n\n{} routers, {} sims, capacity {} req/s; phases of {:?} at {} and {} req/s; flow arm flags: `{}`\n\n",
        run.routers,
        run.workers,
        capacity,
        args.phase,
        capacity * 0.5,
        capacity * 2.0,
        args.flow_args.join(" ")
    );
    md.push_str("| arm | phase | class or tenant | sent | served | 429 | 503 | failed | waited in router, mean ms | TTFT p50 ms | TTFT p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut fairness = String::new();
    // The class the latency target is about, and its p99s.
    let top = top_class(&classes);
    let mut p99s = Vec::new();
    for (arm_name, flow) in [("off", false), ("on", true)] {
        let mut arm = Arm::parse("cache_aware", run.routers, run.isolated_ttl, &[])?;
        arm.label = format!("flow control {arm_name}");
        arm.router_args = vec!["--config".into(), config.display().to_string()];
        if flow {
            arm.router_args.extend(args.flow_args.iter().cloned());
        }
        let mut spec = runner.base.clone();
        spec.arm = arm;
        spec.dir = out.join(format!("logs-{arm_name}"));
        eprintln!("loadtest overload: arm {arm_name}: starting the fleet");
        let fleet = Fleet::start(spec).await?;
        let client = Client::new(&fleet.url(), run.request_timeout)?;
        let mut numbered = 0u64;
        for (phase_name, factor) in [("half", 0.5), ("2x", 2.0)] {
            eprintln!("loadtest overload: arm {arm_name}, phase {phase_name}");
            let before = fleet.router_metrics().await;
            let offer = Offer {
                rate: capacity * factor,
                span: args.phase,
                first: numbered,
            };
            let sent = phase(&client, &run.model, &args, &classes, &tenants, offer).await;
            numbered += sent.len() as u64;
            let after = fleet.router_metrics().await;
            let waited = |label: (&str, &str)| {
                let name = "prefix_router_flow_wait_seconds_sum";
                sum_f64(&after, name, Some(label)) - sum_f64(&before, name, Some(label))
            };
            for (i, c) in classes.iter().enumerate() {
                let of: Vec<&Sent> = sent.iter().filter(|s| s.class == i).collect();
                if Some(i) == top {
                    let ttft = ttft_ms(&of);
                    if !ttft.is_empty() {
                        p99s.push((arm_name, phase_name, nearest_rank(&ttft, 0.99)));
                    }
                }
                let _ = writeln!(
                    md,
                    "| {arm_name} | {phase_name} | class {} (priority {}) | {} |",
                    c.name,
                    c.number,
                    row(&of, waited(("band", &(c.number as i64).to_string())))
                );
            }
            let mut per_weight = Vec::new();
            for (i, t) in tenants.iter().enumerate() {
                let of: Vec<&Sent> = sent.iter().filter(|s| s.tenant == i).collect();
                let served = of.iter().filter(|s| s.outcome.ok()).count();
                per_weight.push(served as f64 / t.number.max(1.0));
                let _ = writeln!(
                    md,
                    "| {arm_name} | {phase_name} | tenant {} (weight {}) | {} |",
                    t.name,
                    t.number,
                    row(&of, waited(("tenant", &t.name)))
                );
            }
            let total_served: usize = sent.iter().filter(|s| s.outcome.ok()).count();
            let shares: Vec<String> = tenants
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let n = sent
                        .iter()
                        .filter(|s| s.tenant == i && s.outcome.ok())
                        .count();
                    // How the routers let this tenant's requests through.
                    let paths: Vec<String> = ["direct", "granted", "dispatched", "unavailable"]
                        .iter()
                        .map(|path| {
                            let name = "prefix_router_flow_admitted_total";
                            let labels = [("tenant", t.name.as_str()), ("path", *path)];
                            let n = sum_where(&after, name, &labels)
                                - sum_where(&before, name, &labels);
                            format!("{n:.0}")
                        })
                        .collect();
                    format!(
                        "{} {:.0}% ({})",
                        t.name,
                        100.0 * n as f64 / total_served.max(1) as f64,
                        paths.join("/")
                    )
                })
                .collect();
            let _ = writeln!(
                fairness,
                "| {arm_name} | {phase_name} | {} | {} |",
                shares.join(", "),
                jain(&per_weight).map_or("-".into(), |j| format!("{j:.3}"))
            );
            let lost: Vec<&Sent> = sent
                .iter()
                .filter(|s| !s.outcome.ok() && !matches!(s.outcome.status, Some(429 | 503)))
                .collect();
            for l in lost.iter().take(3) {
                eprintln!("  failed: {:?}", l.outcome.error);
            }
        }
        fleet.stop().await;
    }
    md.push_str(&target_line(&classes, run.workers, capacity, &p99s));
    md.push_str("\n| arm | phase | served share by tenant (let through direct/granted/dispatched/unavailable, routers' counts) | Jain's index (served per weight) |\n|---|---|---|---|\n");
    md.push_str(&fairness);
    let path = out.join("overload.md");
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    println!("{md}");
    Ok(path)
}
