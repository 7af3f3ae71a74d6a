//! `loadtest rate-limit`: the fleet-wide rate limits held to what users
//! read into "per minute" (issue 28): 4 routers behind the balancer, a
//! tenant limited to `--limit` requests (or tokens) per minute offered
//! `--offered` per minute for `--duration`, its requests spread over every
//! router by the balancer; a second tenant offered less than its limit
//! beside it. Reported: accepted per tenant per minute across all routers
//! (expected within limit −5% … +5%), and whether every refusal was a 429
//! with OpenAI's rate limit headers and `Retry-After`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::cli::RunArgs;
use crate::drive::DriveOptions;
use crate::report::out_dir;
use crate::run::fleet_runner;
use crate::topology::{Arm, Fleet};

/// `loadtest rate-limit`.
#[derive(Args, Debug, Clone)]
pub struct RateLimitArgs {
    /// The fleet, as for `loadtest run` (`--routers` defaults to 4 here;
    /// the workload flags are not used).
    #[command(flatten)]
    pub run: RunArgs,
    /// What the limit counts: `requests` or `tokens` (per minute).
    #[arg(
        long = "rate-unit",
        default_value = "requests",
        help_heading = "Rate limit"
    )]
    pub unit: String,
    /// The busy tenant's limit per minute (requests, or tokens).
    #[arg(
        long = "rate-limit",
        default_value_t = 120,
        help_heading = "Rate limit"
    )]
    pub rate_limit: u64,
    /// Requests per minute the busy tenant sends.
    #[arg(
        long = "offered-per-minute",
        default_value_t = 600,
        help_heading = "Rate limit"
    )]
    pub offered: u64,
    /// Requests per minute the quiet tenant sends (its limit is the same).
    #[arg(
        long = "quiet-per-minute",
        default_value_t = 30,
        help_heading = "Rate limit"
    )]
    pub quiet_offered: u64,
    /// `max_tokens` of each request (with `--rate-unit tokens`, each request
    /// counts its prompt and this, corrected by the answer's usage).
    #[arg(
        long = "request-max-tokens",
        default_value_t = 16,
        help_heading = "Rate limit"
    )]
    pub max_tokens: u64,
    /// How long the tenants send.
    #[arg(long, default_value = "2m", value_parser = protocol::parse_duration, help_heading = "Rate limit")]
    pub offered_for: Duration,
}

/// One request's outcome.
#[derive(Debug, Clone)]
struct Sent {
    tenant: &'static str,
    /// Seconds from the start, when sent.
    at: f64,
    status: u16,
    /// A 429 carried `Retry-After` and the unit's three rate limit headers.
    complete_refusal: bool,
    /// Tokens the answer used (usage), for `--unit tokens`.
    tokens: u64,
}

/// Runs the check; returns the output directory.
pub async fn rate_limit(mut args: RateLimitArgs) -> anyhow::Result<PathBuf> {
    let unit = match args.unit.as_str() {
        "requests" | "tokens" => args.unit.clone(),
        other => bail!("--rate-unit is requests or tokens, not {other:?}"),
    };
    if args.rate_limit == 0 || args.offered == 0 {
        bail!("--rate-limit and --offered-per-minute must be positive");
    }
    if args.run.routers == 1 {
        args.run.routers = 4;
    }
    let out = out_dir(args.run.out.as_deref(), "rate-limit-");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let drive = DriveOptions {
        model: args.run.model.clone(),
        stream: false,
    };
    let runner = fleet_runner(&args.run, 1.0, &out, drive)?;
    let mut spec = runner.base.clone();
    spec.arm = Arm::parse("cache_aware", args.run.routers, Duration::ZERO, &[])?;
    spec.dir = out.join("logs");
    let flag = format!("--tenant-{unit}-per-minute");
    spec.routers
        .extra_args
        .extend([flag, args.rate_limit.to_string()]);
    eprintln!(
        "loadtest rate-limit: {} routers, a tenant limited to {} {unit}/min offered {} requests/min for {:?}; output in {}",
        args.run.routers,
        args.rate_limit,
        args.offered,
        args.offered_for,
        out.display()
    );
    let fleet = Fleet::start(spec).await.context("starting the fleet")?;
    let sent = drive_tenants(&fleet.url(), &args, &unit).await;
    fleet.stop().await;
    let report = summarize(&sent, &args, &unit);
    std::fs::write(out.join("rate_limit.md"), &report.markdown)?;
    std::fs::write(
        out.join("rate_limit.json"),
        serde_json::to_vec_pretty(&report.json)?,
    )?;
    println!("{}", report.markdown);
    Ok(out)
}

/// Sends both tenants' requests at their rates; every answer's outcome.
async fn drive_tenants(url: &str, args: &RateLimitArgs, unit: &str) -> Vec<Sent> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_default();
    let endpoint = Arc::new(format!("{url}/v1/completions"));
    let model = Arc::new(args.run.model.clone());
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    let mut schedule = Vec::new();
    for (tenant, per_min) in [("busy", args.offered), ("quiet", args.quiet_offered)] {
        if per_min == 0 {
            continue;
        }
        let gap = Duration::from_secs_f64(60.0 / per_min as f64);
        let n = (args.offered_for.as_secs_f64() * per_min as f64 / 60.0).round() as u64;
        for i in 0..n {
            schedule.push((gap * u32::try_from(i).unwrap_or(u32::MAX), tenant));
        }
    }
    schedule.sort();
    let unit = Arc::new(unit.to_owned());
    let max_tokens = args.max_tokens;
    for (i, (at, tenant)) in schedule.into_iter().enumerate() {
        tokio::time::sleep_until((start + at).into()).await;
        let (client, endpoint, model, unit) = (
            client.clone(),
            endpoint.clone(),
            model.clone(),
            unit.clone(),
        );
        tasks.spawn(async move {
            let sent_at = start.elapsed().as_secs_f64();
            let body = json!({
                "model": *model,
                "prompt": format!("Request {i} of the {tenant} tenant: say something short."),
                "max_tokens": max_tokens,
            });
            let answer = client
                .post(endpoint.as_str())
                .bearer_auth(format!("sk-{tenant}"))
                .json(&body)
                .send()
                .await;
            let (status, complete_refusal, tokens) = match answer {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let complete = status == 429
                        && resp.headers().contains_key("retry-after")
                        && ["limit", "remaining", "reset"].iter().all(|h| {
                            resp.headers()
                                .contains_key(format!("x-ratelimit-{h}-{unit}").as_str())
                        });
                    let body: Value = resp.json().await.unwrap_or(Value::Null);
                    let used = &body["usage"];
                    let tokens = used["prompt_tokens"].as_u64().unwrap_or(0)
                        + used["completion_tokens"].as_u64().unwrap_or(0);
                    let complete = complete
                        && body["error"]["type"] == "rate_limit_exceeded"
                        && body["error"]["code"] == "rate_limit_exceeded";
                    (status, complete, tokens)
                }
                Err(_) => (0, false, 0),
            };
            Sent {
                tenant,
                at: sent_at,
                status,
                complete_refusal,
                tokens,
            }
        });
    }
    let mut sent = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Ok(s) = done {
            sent.push(s);
        }
    }
    sent
}

/// The most `points` (time in seconds, sorted; amount) hold in any window
/// of `span` seconds, wherever it starts.
fn busiest_window(points: &[(f64, u64)], span: f64) -> u64 {
    let (mut best, mut sum, mut from) = (0, 0, 0);
    for &(at, n) in points {
        sum += n;
        while points[from].0 <= at - span {
            sum -= points[from].1;
            from += 1;
        }
        best = best.max(sum);
    }
    best
}

struct Report {
    markdown: String,
    json: Value,
}

fn summarize(sent: &[Sent], args: &RateLimitArgs, unit: &str) -> Report {
    let minutes = (args.offered_for.as_secs_f64() / 60.0).ceil().max(1.0) as usize;
    let (low, high) = (args.rate_limit * 95 / 100, args.rate_limit * 105 / 100);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Rate limit check\n\n{} routers behind the balancer; limit {} {unit}/min per tenant; busy tenant offered {} requests/min, quiet tenant {} requests/min, for {:?}.\n",
        args.run.routers, args.rate_limit, args.offered, args.quiet_offered, args.offered_for
    );
    let _ = writeln!(
        md,
        "| tenant | minute | sent | accepted | accepted {unit} | refused (429) | other |\n|---|---|---|---|---|---|---|"
    );
    let mut rows = Vec::new();
    let mut busy_ok = true;
    for tenant in ["busy", "quiet"] {
        for m in 0..minutes {
            let in_minute: Vec<&Sent> = sent
                .iter()
                .filter(|s| {
                    s.tenant == tenant && s.at >= 60.0 * m as f64 && s.at < 60.0 * (m + 1) as f64
                })
                .collect();
            let accepted = in_minute.iter().filter(|s| s.status == 200).count() as u64;
            let tokens: u64 = in_minute
                .iter()
                .filter(|s| s.status == 200)
                .map(|s| s.tokens)
                .sum();
            let refused = in_minute.iter().filter(|s| s.status == 429).count();
            let other = in_minute.len() - accepted as usize - refused;
            let counted = if unit == "tokens" { tokens } else { accepted };
            if tenant == "busy" && !(low..=high).contains(&counted) {
                busy_ok = false;
            }
            let _ = writeln!(
                md,
                "| {tenant} | {m} | {} | {accepted} | {counted} | {refused} | {other} |",
                in_minute.len()
            );
            rows.push(json!({"tenant": tenant, "minute": m, "sent": in_minute.len(), "accepted": accepted, "accepted_units": counted, "refused": refused, "other": other}));
        }
    }
    // "Per minute" as users read it: no 60-second window, wherever it
    // starts, holds more than the limit (+5%).
    let mut accepted: Vec<(f64, u64)> = sent
        .iter()
        .filter(|s| s.tenant == "busy" && s.status == 200)
        .map(|s| (s.at, if unit == "tokens" { s.tokens } else { 1 }))
        .collect();
    accepted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let busiest = busiest_window(&accepted, 60.0);
    let window_ok = busiest <= high;
    let refusals = sent.iter().filter(|s| s.status == 429).count();
    let complete = sent
        .iter()
        .filter(|s| s.status == 429 && s.complete_refusal)
        .count();
    let others = sent
        .iter()
        .filter(|s| s.status != 200 && s.status != 429)
        .count();
    let quiet_refused = sent
        .iter()
        .filter(|s| s.tenant == "quiet" && s.status == 429)
        .count();
    let _ = writeln!(
        md,
        "\nBusy tenant within {low}–{high} {unit} in every minute: **{}**. Most {unit} accepted in any 60-second window (sliding): {busiest}, at most {high}: **{}**. Refusals: {refusals}, of which {complete} were 429 with Retry-After, the three x-ratelimit-*-{unit} headers and a rate_limit_exceeded body: **{}**. Answers neither 200 nor 429: {others}. Quiet tenant refused: {quiet_refused}.",
        if busy_ok { "yes" } else { "NO" },
        if window_ok { "yes" } else { "NO" },
        if complete == refusals {
            "all"
        } else {
            "NOT all"
        },
    );
    Report {
        markdown: md,
        json: json!({
            "routers": args.run.routers,
            "unit": unit,
            "limit": args.rate_limit,
            "offered_per_minute": args.offered,
            "quiet_offered_per_minute": args.quiet_offered,
            "minutes": rows,
            "busy_within_5_percent": busy_ok,
            "busiest_60s_window": busiest,
            "busiest_window_within_limit": window_ok,
            "refusals": refusals,
            "complete_refusals": complete,
            "other_answers": others,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::busiest_window;

    #[test]
    fn the_busiest_window_may_straddle_two_minutes() {
        // 10 at the end of minute 0 and 10 at the start of minute 1: each
        // minute holds 10, the window across them 20.
        let mut points: Vec<(f64, u64)> = (0..10).map(|i| (55.0 + 0.1 * i as f64, 1)).collect();
        points.extend((0..10).map(|i| (60.5 + 0.1 * i as f64, 1)));
        assert_eq!(busiest_window(&points, 60.0), 20);
        // Spread one a second over two minutes: 60 in any window.
        let even: Vec<(f64, u64)> = (0..120).map(|i| (i as f64, 1)).collect();
        assert_eq!(busiest_window(&even, 60.0), 60);
        // Amounts (tokens) add up.
        assert_eq!(busiest_window(&[(0.0, 5), (59.0, 7), (61.0, 1)], 60.0), 12);
        assert_eq!(busiest_window(&[], 60.0), 0);
    }
}
