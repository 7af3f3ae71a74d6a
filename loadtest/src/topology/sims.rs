//! The fleet's `sim-worker` processes: simulated vLLM replicas with a given
//! KV capacity and time scale, reporting (or not) through the balancer.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use fleet::KvEndpoints;
use fleet::SimSpec;
use fleet::process::ChildProc;

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
    let log = log_dir.join(format!("{id}.log"));
    let mut spec = SimSpec::new(&id, program, model, tokenizer_dir, log)
        .worker_id(&id)
        .args([
            "--num-blocks".to_owned(),
            settings.num_blocks.to_string(),
            "--max-num-seqs".into(),
            settings.max_num_seqs.to_string(),
            "--time-scale".into(),
            settings.time_scale.to_string(),
            "--seed".into(),
            index.to_string(),
        ]);
    spec = match fleet_url {
        Some(url) => spec.pushing(url, token),
        None => spec,
    };
    if kv_events {
        spec = spec.kv_events("tcp://127.0.0.1:0", "tcp://127.0.0.1:0");
    }
    let spec = spec.args(settings.extra_args.iter().cloned());
    let sim = spec.start(Duration::from_secs(60)).await?;
    Ok(Sim {
        proc: sim.proc,
        id,
        url: sim.url,
        kv_events: sim.kv_events,
    })
}

/// The default tokenizer directory: `<workspace>/../shared/tokenizers/qwen3`.
pub fn default_tokenizer_dir() -> PathBuf {
    fleet::binaries::shared_tokenizer_dir()
}
