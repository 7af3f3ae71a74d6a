//! The fleet's `sim-worker` processes: simulated vLLM replicas with a given
//! KV capacity and time scale, reporting (or not) through the balancer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet::process::{ChildProc, ProcSpec};

/// How every sim-worker of a fleet is configured.
#[derive(Debug, Clone)]
pub struct SimSettings {
    /// How many workers.
    pub count: usize,
    /// KV blocks per worker (16 tokens each).
    pub num_blocks: usize,
    /// The sims' `--time-scale` (0.1 = ten times faster than the modelled GPU).
    pub time_scale: f64,
    /// Largest batch per worker (`--max-num-seqs`).
    pub max_num_seqs: usize,
    /// Extra flags passed to every sim-worker.
    pub extra_args: Vec<String>,
}

/// One running sim-worker.
#[derive(Debug)]
pub struct Sim {
    /// Its process.
    pub proc: ChildProc,
    /// Its id in the fleet (`sim-3`).
    pub id: String,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its vLLM KV-event endpoints, when it publishes them.
    pub kv_events: Option<KvEndpoints>,
}

/// A sim's vLLM KV-event sockets (ZMQ, as vLLM's `ZmqEventPublisher`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEndpoints {
    /// The PUB socket (`tcp://127.0.0.1:<port>`).
    pub publisher: String,
    /// The replay ROUTER socket.
    pub replay: String,
}

/// Starts the `index`-th sim-worker of `program` and waits for its
/// `listening on` line. With `fleet_url`, it reports its cache there; with
/// `kv_events`, it publishes vLLM KV events (and serves their replay) on
/// ephemeral ports of 127.0.0.1.
#[allow(clippy::too_many_arguments)]
pub async fn start_sim(
    program: &Path,
    settings: &SimSettings,
    index: usize,
    model: &str,
    tokenizer_dir: &Path,
    fleet_url: Option<&str>,
    kv_events: bool,
    token: &str,
    log_dir: &Path,
) -> anyhow::Result<Sim> {
    let id = format!("sim-{index}");
    let mut args: Vec<String> = vec![
        "--port".into(),
        "0".into(),
        "--worker-id".into(),
        id.clone(),
        "--model".into(),
        model.into(),
        "--tokenizer-dir".into(),
        tokenizer_dir.display().to_string(),
        "--num-blocks".into(),
        settings.num_blocks.to_string(),
        "--max-num-seqs".into(),
        settings.max_num_seqs.to_string(),
        "--time-scale".into(),
        settings.time_scale.to_string(),
        "--seed".into(),
        index.to_string(),
    ];
    if let Some(url) = fleet_url {
        args.extend(["--fleet-url".into(), url.to_owned()]);
    }
    if kv_events {
        args.extend(
            [
                "--kv-events-endpoint",
                "tcp://127.0.0.1:0",
                "--kv-events-replay-endpoint",
                "tcp://127.0.0.1:0",
            ]
            .map(String::from),
        );
    }
    args.extend(settings.extra_args.iter().cloned());
    let mut spec = ProcSpec::new(&id, program, log_dir.join(format!("{id}.log")))
        .args(args)
        .env("PREFIX_ROUTER_INTERNAL_TOKEN", token)
        .env("SIM_WORKER_LOG", "warn");
    spec.pipe_stdout = true;
    let mut proc = spec.spawn()?;
    let mut prefixes = vec!["listening on "];
    if kv_events {
        prefixes.extend(["kv-events on ", "kv-events replay on "]);
    }
    let mut lines = proc
        .wait_lines(&prefixes, Duration::from_secs(60))
        .await?
        .into_iter();
    let url = lines.next().unwrap_or_default();
    let kv_events = match (lines.next(), lines.next()) {
        (Some(publisher), Some(replay)) => Some(KvEndpoints { publisher, replay }),
        _ => None,
    };
    Ok(Sim {
        proc,
        id,
        url,
        kv_events,
    })
}

/// The default tokenizer directory: `<workspace>/../shared/tokenizers/qwen3`.
pub fn default_tokenizer_dir() -> PathBuf {
    fleet::binaries::workspace_root().join("../shared/tokenizers/qwen3")
}
