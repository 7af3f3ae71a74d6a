//! `loadtest real-engine`: the fleet in front of real vLLM engines (the CPU
//! build, a tiny Qwen3 with dummy weights; `scripts/real-vllm.sh` installs
//! it). Checks, for every request shape, that the tokens the router says
//! the serving worker holds equal the engine's own cached-token count;
//! that the index follows an engine's cache reset and restart; and runs
//! the RAG workload against round robin with the engines' own counts;
//! and that an answer whose engine is killed mid-stream completes on the
//! other engine, token for token (issue 29). Records the engines' raw
//! KV-event frames as a test fixture.
//!
//! Layout: `topology` starts the processes; `cases` are the requests;
//! `exactness` compares one request; `follow` resets and restarts an
//! engine; `migration` kills an engine mid-answer (`answer` reads a
//! streamed answer whole); `capture` records ZMQ frames; `report` writes
//! the result.

mod answer;
mod capture;
mod cases;
mod exactness;
mod follow;
mod migration;
mod report;
mod topology;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser};

use crate::cli::{Cli, Command};
use crate::metrics::Summary;
use protocol::parse_duration;
use report::{Rag, Report};
use topology::{MODEL, Settings, Topology};

/// `loadtest real-engine`.
#[derive(Args, Debug, Clone)]
pub struct RealEngineArgs {
    /// The virtualenv holding vLLM's CPU build [default: .real-vllm/venv].
    #[arg(long)]
    pub venv: Option<PathBuf>,
    /// The tiny model's directory [default: .real-vllm/model].
    #[arg(long)]
    pub model_dir: Option<PathBuf>,
    /// `prefix-router` [default: target/release/prefix-router].
    #[arg(long)]
    pub router_bin: Option<PathBuf>,
    /// Output directory [default: target/real-engine/<date>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write the captured KV-event frames of the exactness phase here.
    #[arg(long)]
    pub fixture: Option<PathBuf>,
    /// The engines' block size (the CPU backend needs a multiple of 32).
    #[arg(long, default_value_t = 32)]
    pub block_size: u32,
    /// KV blocks per engine (`--num-gpu-blocks-override`).
    #[arg(long, default_value_t = 200)]
    pub gpu_blocks: u32,
    /// The engines' `--max-model-len` (below gpu_blocks × block_size).
    #[arg(long, default_value_t = 4096)]
    pub max_model_len: u32,
    /// How long an engine may take to start.
    #[arg(long, default_value = "600s", value_parser = parse_duration)]
    pub startup_timeout: Duration,
    /// Skip the engine restart (saves a start-up).
    #[arg(long)]
    pub skip_restart: bool,
    /// Skip the RAG comparison.
    #[arg(long)]
    pub skip_rag: bool,
    /// Skip the mid-stream migration check.
    #[arg(long)]
    pub skip_migration: bool,
    /// Only the mid-stream migration check (no exactness, follow or RAG).
    #[arg(long, conflicts_with = "skip_migration")]
    pub migration_only: bool,
    /// Migration: `max_tokens` of each answer (`ignore_eos`, so exactly
    /// this many tokens; long enough to kill the engine mid-answer).
    #[arg(long, default_value_t = 2000)]
    pub migration_tokens: u32,
    /// Migration: the serving engine is killed once the client has this
    /// many content events.
    #[arg(long, default_value_t = 100)]
    pub kill_after: usize,
    /// RAG: requests per second.
    #[arg(long, default_value_t = 2.0)]
    pub rag_rate: f64,
    /// RAG: arrivals stop after this.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub rag_duration: Duration,
    /// RAG: documents.
    #[arg(long, default_value_t = 12)]
    pub rag_documents: usize,
    /// RAG: words per document.
    #[arg(long, default_value_t = 600)]
    pub rag_doc_words: usize,
}

/// Pause for the engine's events to reach the fleet (the reporter flushes
/// every 100 ms) and for the routers' speculative claims (1 s here) to
/// expire, so that a second send matches only what the engine reported.
const SETTLE: Duration = Duration::from_millis(1500);

/// Runs the check; fails if any request disagreed or the index did not
/// follow the engine.
pub async fn real_engine(args: RealEngineArgs) -> anyhow::Result<PathBuf> {
    let root = fleet::binaries::workspace_root();
    let venv = args
        .venv
        .clone()
        .unwrap_or_else(|| root.join(".real-vllm/venv"));
    let model_dir = args
        .model_dir
        .clone()
        .unwrap_or_else(|| root.join(".real-vllm/model"));
    if !venv.join("bin/vllm").is_file() {
        bail!(
            "{} has no bin/vllm: run scripts/real-vllm.sh (it installs vLLM's CPU build)",
            venv.display()
        );
    }
    let router_bin = args
        .router_bin
        .clone()
        .unwrap_or_else(|| fleet::binaries::target_dir().join("release/prefix-router"));
    if !router_bin.is_file() {
        bail!(
            "{} not found: cargo build --release -p prefix-router",
            router_bin.display()
        );
    }
    let out = args.out.clone().unwrap_or_else(|| {
        let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
        fleet::binaries::target_dir()
            .join("real-engine")
            .join(stamp.to_string())
    });
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let settings = Settings {
        venv,
        model_dir: model_dir.clone(),
        router_bin,
        dir: out.join("logs"),
        block_size: args.block_size,
        gpu_blocks: args.gpu_blocks,
        max_model_len: args.max_model_len,
        startup_timeout: args.startup_timeout,
    };
    eprintln!(
        "real-engine: starting 2 vLLM engines, Valkey, 2 routers, HAProxy; logs in {}",
        settings.dir.display()
    );
    #[rustfmt::skip]
    let exact_args = ["--speculative-ttl", "1s", "--migration-limit", "3"].map(str::to_owned);
    let mut t = Topology::start(settings, 2, &exact_args).await?;
    let mut recorder = capture::Recorder::default();
    for e in &t.engines {
        recorder.subscribe(&e.name, &e.kv_endpoint()).await?;
    }

    // Exactness: every case twice, through router 0 then router 1.
    let http = reqwest::Client::new();
    let routers = t.router_urls();
    let bs = u64::from(args.block_size);
    let all = cases::cases(MODEL);
    let mut rows = Vec::new();
    let exactness = if args.migration_only {
        &[][..]
    } else {
        &all[..]
    };
    for case in exactness {
        for (round, router) in [(1, 0), (2, 1)] {
            let row =
                exactness::check(&http, &routers, router, topology::TOKEN, bs, case, round).await?;
            eprintln!(
                "real-engine: {} #{round}: {} matched {} expected {} engine {} ({:?})",
                case.name,
                row.worker,
                row.matched_tokens,
                row.expected_cached,
                row.engine_cached,
                row.verdict
            );
            rows.push(row);
            tokio::time::sleep(SETTLE).await;
        }
    }

    // The index follows the engine.
    let reset_probe = cases::probe(MODEL, "completions: text (cache reset probe)", 11);
    let mut followed = Vec::new();
    if !args.migration_only {
        followed.push(follow::after_reset(&t, &reset_probe).await?);
    }
    if !args.skip_restart && !args.migration_only {
        let probe = cases::probe(MODEL, "completions: text (restart probe)", 12);
        followed.push(follow::after_restart(&mut t, &probe).await?);
    }
    // One replay exchange, then the frames so far.
    let replayed = recorder
        .replay(&t.engines[0].name, &t.engines[0].replay_endpoint(), 0, 64)
        .await;
    if let Err(e) = &replayed {
        eprintln!("real-engine: replay capture failed: {e:#}");
    }
    let frames = recorder.recorded().snapshot();
    let version = engine_version(&http, &t.engines[0].url()).await;
    let fixture = capture::Fixture::new(&frames, version, args.block_size);
    let frames_json = serde_json::to_string_pretty(&fixture)?;
    std::fs::write(out.join("frames.json"), &frames_json)?;
    if let Some(path) = &args.fixture {
        std::fs::write(path, &frames_json)
            .with_context(|| format!("writing {}", path.display()))?;
    }

    // An engine killed mid-answer.
    let mut migrated = Vec::new();
    if !args.skip_migration {
        for case in migration::cases(args.migration_tokens) {
            migrated.push(migration::run(&mut t, &case, args.kill_after).await?);
        }
    }

    // RAG through the fleet: cache_aware, then round_robin, from cold caches.
    let mut rag = Vec::new();
    if !args.skip_rag && !args.migration_only {
        for policy in ["cache_aware", "round_robin"] {
            for i in 0..t.engines.len() {
                t.reset_prefix_cache(i).await?;
            }
            t.restart_routers(policy).await?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let summary =
                run_rag(&args, &t, &model_dir, &out.join(format!("rag-{policy}"))).await?;
            rag.push(Rag {
                policy: policy.to_owned(),
                summary,
            });
        }
    }
    let report = Report {
        rows,
        followed,
        migrated,
        rag,
        frames: frames.len(),
        args: &args,
    };
    let text = report.markdown();
    std::fs::write(out.join("real-engine.md"), &text)?;
    println!("{text}");
    if !report.passed() {
        bail!(
            "the check failed; see {}",
            out.join("real-engine.md").display()
        );
    }
    Ok(out)
}

/// The engine's `GET /version`, or "unknown".
async fn engine_version(http: &reqwest::Client, url: &str) -> String {
    let v: Option<serde_json::Value> = match http.get(format!("{url}/version")).send().await {
        Ok(r) => r.json().await.ok(),
        Err(_) => None,
    };
    v.and_then(|v| v["version"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The command line of [`run_rag`].
fn rag_argv(
    args: &RealEngineArgs,
    url: &str,
    model_dir: &std::path::Path,
    out: &std::path::Path,
) -> Vec<String> {
    let (rate, duration) = (
        args.rag_rate.to_string(),
        format!("{}s", args.rag_duration.as_secs()),
    );
    let (documents, words) = (
        args.rag_documents.to_string(),
        args.rag_doc_words.to_string(),
    );
    let (tokenizer, out) = (model_dir.display().to_string(), out.display().to_string());
    #[rustfmt::skip]
    let argv = [
        "loadtest", "run", "--target", url, "--workload", "rag", "--api", "completions",
        "--rate", &rate, "--duration", &duration, "--documents", &documents,
        "--doc-words", &words, "--output-tokens", "8", "--calibration", "0",
        "--model", MODEL, "--tokenizer-dir", &tokenizer, "--out", &out,
    ];
    argv.map(str::to_owned).to_vec()
}

/// `loadtest run --target <balancer> --workload rag` against the fleet.
async fn run_rag(
    args: &RealEngineArgs,
    t: &Topology,
    model_dir: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<Summary> {
    let argv = rag_argv(args, &t.balancer.url(), model_dir, out);
    let Command::Run(run) = Cli::try_parse_from(argv)?.command else {
        bail!("not a run command");
    };
    let (_, report) = crate::run::run_report(*run).await?;
    report
        .scenarios
        .first()
        .and_then(|s| s.arms.first())
        .map(|a| a.summary.clone())
        .context("the RAG run has no result")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rag_run_is_a_valid_loadtest_command() {
        let Ok(Cli {
            command: Command::RealEngine(args),
        }) = Cli::try_parse_from(["loadtest", "real-engine"])
        else {
            panic!("real-engine parses");
        };
        let argv = rag_argv(&args, "http://127.0.0.1:1", "/m".as_ref(), "/o".as_ref());
        let Ok(Cli {
            command: Command::Run(run),
        }) = Cli::try_parse_from(argv)
        else {
            panic!("the RAG command line parses");
        };
        assert_eq!(run.target.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(run.workload, "rag");
        assert_eq!(run.documents, args.rag_documents);
    }
}
