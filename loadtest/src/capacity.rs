//! `loadtest capacity`: what one Valkey core and one router core carry.
//!
//! For each prompt size (RAG documents of about 1k, 8k and 32k tokens), the
//! fleet (R routers behind HAProxy, W light sims: near-zero model time, one
//! output token, so that the fleet's own work dominates) is driven at
//! increasing offered rates, one `loadtest run` each, until Valkey or the
//! routers pass `--busy` percent of a core or requests fail. Each step
//! reports the CPU per routed request of Valkey and of the routers and
//! their inverse, routed requests per second per core: the figures
//! docs/capacity.md projects from.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser};
use protocol::parse_duration;

use crate::cli::RunArgs;
use crate::runner::ArmResult;

/// `loadtest capacity`.
#[derive(Args, Debug, Clone)]
pub struct CapacityArgs {
    /// Prompt sizes, in tokens (approximate: documents of 0.9 words a token).
    #[arg(long, value_delimiter = ',', default_values_t = [1000usize, 8000, 32000])]
    pub tokens: Vec<usize>,
    /// Offered rates (requests/s), tried in order for each size.
    #[arg(long, value_delimiter = ',', default_values_t = [10.0f64, 20.0, 40.0, 80.0])]
    pub rates: Vec<f64>,
    /// Load per step.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Simulated workers.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Router replicas.
    #[arg(long, default_value_t = 2)]
    pub routers: usize,
    /// Stop a size's ramp once Valkey or the routers (all together) use this
    /// many percent of one core.
    #[arg(long, default_value_t = 80.0)]
    pub busy: f64,
    /// A further `loadtest run` flag for every step (repeatable), e.g.
    /// `--run-arg=--router-bin=PATH`.
    #[arg(long = "run-arg", allow_hyphen_values = true)]
    pub run_args: Vec<String>,
    /// Output directory [default: target/loadtest/capacity-<date>].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One measured step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Target prompt size, tokens.
    pub tokens: usize,
    /// Offered requests/s.
    pub offered: f64,
    /// Completed requests/s.
    pub achieved: f64,
    /// Failed requests.
    pub failed: usize,
    /// Tokens per request, measured (prompt and output).
    pub tokens_per_request: f64,
    /// Valkey CPU, % of one core.
    pub valkey: f64,
    /// All routers' CPU, % of one core.
    pub routers: f64,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
}

impl Step {
    /// CPU milliseconds per request of a process using `percent` of a core.
    fn ms_per_request(&self, percent: f64) -> Option<f64> {
        (self.achieved > 0.0).then(|| 10.0 * percent / self.achieved)
    }

    /// Valkey CPU per routed request, ms.
    pub fn valkey_ms(&self) -> Option<f64> {
        self.ms_per_request(self.valkey)
    }

    /// Routers' CPU per routed request, ms.
    pub fn routers_ms(&self) -> Option<f64> {
        self.ms_per_request(self.routers)
    }

    fn from_arm(tokens: usize, offered: f64, arm: &ArmResult) -> Step {
        let s = &arm.summary;
        let cpu = arm.cpu;
        Step {
            tokens,
            offered,
            achieved: s.req_per_s,
            failed: s.failed,
            tokens_per_request: if s.req_per_s > 0.0 {
                s.tokens_per_s / s.req_per_s
            } else {
                0.0
            },
            valkey: cpu.map_or(0.0, |c| c.valkey),
            routers: cpu.map_or(0.0, |c| c.routers),
            ttft_p99_ms: s.ttft_ms.as_ref().map(|p| p.p99),
        }
    }
}

/// `loadtest run`'s flags, parsed as the binary would.
#[derive(Parser)]
struct RunCommand {
    #[command(flatten)]
    run: RunArgs,
}

/// The `loadtest run` flags of one step.
fn step_args(a: &CapacityArgs, tokens: usize, rate: f64, out: &std::path::Path) -> Vec<String> {
    let words = (tokens * 9 / 10).max(1);
    let mut v: Vec<String> = [
        "loadtest",
        "--workload",
        "rag",
        "--api",
        "completions",
        "--documents",
        "32",
        "--question-words",
        "10",
        "--output-tokens",
        "1",
        "--time-scale",
        "0.001",
        "--calibration",
        "0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    v.extend([
        "--doc-words".into(),
        words.to_string(),
        "--rate".into(),
        rate.to_string(),
        "--duration".into(),
        format!("{}s", a.duration.as_secs_f64()),
        "--workers".into(),
        a.workers.to_string(),
        "--policies".into(),
        format!("cache_aware:{}", a.routers),
        "--out".into(),
        out.display().to_string(),
    ]);
    v.extend(a.run_args.iter().cloned());
    v
}

/// Runs every step; writes and prints the table; returns its path.
pub async fn capacity(a: CapacityArgs) -> anyhow::Result<PathBuf> {
    let out = a.out.clone().unwrap_or_else(|| {
        let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
        fleet::binaries::target_dir()
            .join("loadtest")
            .join(format!("capacity-{stamp}"))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut steps = Vec::new();
    for &tokens in &a.tokens {
        for &rate in &a.rates {
            let dir = out.join(format!("{tokens}-tokens-{rate}-rps"));
            let argv = step_args(&a, tokens, rate, &dir);
            let run = RunCommand::try_parse_from(&argv)
                .with_context(|| format!("step flags {argv:?}"))?
                .run;
            let (_, report) = crate::run::run_report(run).await?;
            let Some(arm) = report.scenarios.first().and_then(|s| s.arms.first()) else {
                anyhow::bail!("step {tokens} tokens at {rate}/s produced no result");
            };
            let step = Step::from_arm(tokens, rate, arm);
            eprintln!("capacity: {}", row(&step).join(" | "));
            let saturated = step.failed > 0 || step.valkey >= a.busy || step.routers >= a.busy;
            steps.push(step);
            if saturated {
                break;
            }
        }
    }
    let text = table(&steps);
    let path = out.join("capacity.md");
    std::fs::write(
        &path,
        format!("# Capacity\n\n{}\n\n{text}", crate::report::command_line()),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    println!("{text}\nreport: {}", path.display());
    Ok(path)
}

fn row(s: &Step) -> Vec<String> {
    let ms = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.2}"));
    let per_core = |x: Option<f64>| {
        x.filter(|v| *v > 0.0)
            .map_or("-".into(), |v| format!("{:.0}", 1000.0 / v))
    };
    vec![
        s.tokens.to_string(),
        format!("{:.0}", s.tokens_per_request),
        format!("{:.0}", s.offered),
        format!("{:.1}", s.achieved),
        s.failed.to_string(),
        format!("{:.0}%", s.valkey),
        format!("{:.0}%", s.routers),
        ms(s.valkey_ms()),
        ms(s.routers_ms()),
        per_core(s.valkey_ms()),
        per_core(s.routers_ms()),
        s.ttft_p99_ms.map_or("-".into(), |v| format!("{v:.0}")),
    ]
}

/// The steps as a Markdown table.
pub fn table(steps: &[Step]) -> String {
    let mut out = String::from(
        "| prompt tokens | tokens/req measured | offered req/s | routed req/s | failed | valkey CPU | routers CPU | valkey ms/req | routers ms/req | req/s per valkey core | req/s per router core | TTFT p99 ms |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for s in steps {
        let _ = writeln!(out, "| {} |", row(s).join(" | "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_request_and_per_core_figures() {
        let s = Step {
            tokens: 8000,
            offered: 20.0,
            achieved: 20.0,
            failed: 0,
            tokens_per_request: 8100.0,
            valkey: 5.0,
            routers: 40.0,
            ttft_p99_ms: Some(12.0),
        };
        assert_eq!(s.valkey_ms(), Some(2.5));
        assert_eq!(s.routers_ms(), Some(20.0));
        let t = table(&[s]);
        // 1000 / 2.5 ms = 400 req/s per Valkey core; 1000 / 20 = 50 per router core.
        assert!(
            t.contains("| 8000 | 8100 | 20 | 20.0 | 0 | 5% | 40% | 2.50 | 20.00 | 400 | 50 | 12 |"),
            "{t}"
        );
    }

    #[test]
    fn every_step_parses_as_a_run() {
        let a = CapacityArgs {
            tokens: vec![1000],
            rates: vec![10.0],
            duration: Duration::from_secs(5),
            workers: 4,
            routers: 2,
            busy: 80.0,
            run_args: vec!["--router-arg=--epsilon=0.5".into()],
            out: None,
        };
        let argv = step_args(&a, 1000, 10.0, std::path::Path::new("/tmp/x"));
        let run = RunCommand::try_parse_from(&argv).unwrap().run;
        assert_eq!(run.workload, "rag");
        assert_eq!(run.doc_words, 900);
        assert_eq!(run.workers, 4);
        assert_eq!(run.output_tokens, 1);
        assert_eq!(run.router_args, ["--epsilon=0.5"]);
    }
}
