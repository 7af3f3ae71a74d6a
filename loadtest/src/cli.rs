//! The `loadtest` command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::scenario::Scenario;
use crate::topology::BalancerChoice;
use crate::workload::Api;
use protocol::{parse_duration, parse_duration_or_zero};

/// Load tests of a prefix-router fleet: launches Valkey, routers behind an
/// L4 balancer and simulated vLLM workers on 127.0.0.1, replays a workload
/// through them for each compared policy, and writes a report.
#[derive(Parser, Debug)]
#[command(name = "loadtest", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the comparison and write the report.
    Run(Box<RunArgs>),
    /// The fleet's capacity per policy: the workload at rising load
    /// factors until TTFT p99 passes a bound (2 s) or requests fail.
    Ramp(Box<crate::ramp::RampArgs>),
    /// CPU per routed request of Valkey and the routers, and requests per
    /// core, for several prompt sizes at rising rates.
    Capacity(Box<crate::capacity::CapacityArgs>),
    /// Prefill/decode disaggregation against colocated workers on a chat
    /// or RAG workload: TTFT, time per output token, each role's hit rate,
    /// skipped prefills (`pd.md`).
    Pd(Box<crate::pd::PdArgs>),
    /// Overload: classes and tenants offered half, then twice what the
    /// fleet serves, flow control off and on side by side (`overload.md`).
    Overload(Box<crate::overload::OverloadArgs>),
    /// The fleet in front of two real vLLM CPU engines (scripts/real-vllm.sh
    /// installs them): router matches against the engines' cached tokens,
    /// cache reset and engine restart, RAG against round robin.
    RealEngine(Box<crate::real_engine::RealEngineArgs>),
    /// Tenants' rate limits held fleet-wide: a tenant limited per minute
    /// offered 5× that over 4 routers; accepted per tenant per minute and
    /// whether every refusal was OpenAI's 429 (`rate_limit.md`).
    RateLimit(Box<crate::rate_limit::RateLimitArgs>),
    /// The thin OpenAI frontend of Dynamo's selection service (the `dynamo`
    /// peer runs one beside each selection-service replica).
    DynamoFrontend(Box<crate::peers::dynamo::FrontendArgs>),
}

/// `loadtest run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    // ---- the fleet ----
    /// Target an already running fleet at this URL (no launch; one arm,
    /// steady scenario only).
    #[arg(long, help_heading = "Fleet")]
    pub target: Option<String>,
    /// With --target: one of its workers' URL, to calibrate the overhead.
    #[arg(long, requires = "target", help_heading = "Fleet")]
    pub direct: Option<String>,
    /// Compared arms, comma-separated: POLICY[:ROUTERS][+VARIANT...] with
    /// POLICY one of cache_aware, round_robin, least_loaded, power_of_two,
    /// consistent_hash, isolated (own view per router), or a --peer name,
    /// and each VARIANT a --variant name whose flags that arm's routers get.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cache_aware:1,cache_aware,round_robin,least_loaded,consistent_hash,isolated",
        help_heading = "Fleet"
    )]
    pub policies: Vec<String>,
    /// Scenarios, comma-separated: steady, router-restart, valkey-restart,
    /// worker-kill, rolling-restart. Each one runs every arm.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "steady",
        help_heading = "Fleet"
    )]
    pub scenario: Vec<Scenario>,
    /// Router replicas per arm (unless the arm says :ROUTERS).
    #[arg(long, default_value_t = 2, help_heading = "Fleet")]
    pub routers: usize,
    /// sim-worker processes.
    #[arg(long, default_value_t = 3, help_heading = "Fleet")]
    pub workers: usize,
    /// KV blocks per worker (16 tokens each).
    #[arg(long, default_value_t = 8192, help_heading = "Fleet")]
    pub num_blocks: usize,
    /// The sims' time scale [default: 1/--speedup for a trace, else 1].
    #[arg(long, help_heading = "Fleet")]
    pub time_scale: Option<f64>,
    /// Largest batch per worker (vLLM's --max-num-seqs).
    #[arg(long, default_value_t = 256, help_heading = "Fleet")]
    pub max_num_seqs: usize,
    /// The L4 balancer: haproxy or builtin (in-process, no health checks).
    #[arg(long, default_value = "haproxy", help_heading = "Fleet")]
    pub balancer: BalancerChoice,
    /// Life of a routing claim in the isolated arm.
    #[arg(long, default_value = "10m", value_parser = parse_duration, help_heading = "Fleet")]
    pub isolated_ttl: Duration,
    /// An external router NAME=COMMAND (placeholders {port}, {aux_port},
    /// {worker_urls}, {worker_urls_csv}, {model}, …), or the name of a known
    /// peer, installed from PyPI into target/peers: sglang-router,
    /// vllm-router (cache_aware), or the best modes vllm-router-kv (kv_aware
    /// on KV events), smg (cache_aware + mesh), dynamo (selection service +
    /// our frontend; needs a private network namespace); usable in
    /// --policies (repeatable).
    #[arg(long = "peer", help_heading = "Fleet")]
    pub peers: Vec<String>,
    /// An extra flag for every `prefix-router serve` (repeatable).
    #[arg(
        long = "router-arg",
        allow_hyphen_values = true,
        help_heading = "Fleet"
    )]
    pub router_args: Vec<String>,
    /// A named set of router flags `NAME=FLAG` (repeatable; one flag per
    /// use, `--variant flow=--max-in-flight-per-worker=64`), given to the
    /// arms that name it (`cache_aware:4+flow`): flags compared side by side
    /// in one run.
    #[arg(long = "variant", allow_hyphen_values = true, help_heading = "Fleet")]
    pub variants: Vec<String>,
    /// An LMCache beside every sim (issue 31): each arm gets a fresh real
    /// LMCache controller (from the venv `scripts/lmcache-test.sh` builds:
    /// `--lmcache-venv`, else `$LMCACHE_VENV`, else target/lmcache-venv),
    /// every sim `--lmcache-controller` (its CPU tier reported there, not
    /// to the fleet), and `@lmcache` in router flags becomes the
    /// controller's URL (`--variant lm=--lmcache-controller=@lmcache`).
    #[arg(long, help_heading = "Fleet")]
    pub lmcache: bool,
    /// The LMCache venv for `--lmcache`.
    #[arg(long, requires = "lmcache", help_heading = "Fleet")]
    pub lmcache_venv: Option<PathBuf>,
    /// An extra flag for every sim-worker (repeatable).
    #[arg(long = "sim-arg", allow_hyphen_values = true, help_heading = "Fleet")]
    pub sim_args: Vec<String>,
    /// The served model name.
    #[arg(long, default_value = "qwen3", help_heading = "Fleet")]
    pub model: String,
    /// Tokenizer directory [default: ../shared/tokenizers/qwen3 beside the repo].
    #[arg(long, help_heading = "Fleet")]
    pub tokenizer_dir: Option<PathBuf>,
    /// `prefix-router` [default: target/<profile>/prefix-router, built if missing].
    #[arg(long, help_heading = "Binaries")]
    pub router_bin: Option<PathBuf>,
    /// `sim-worker` [default: target/<profile>/sim-worker, built if missing].
    #[arg(long, help_heading = "Binaries")]
    pub sim_bin: Option<PathBuf>,
    /// `valkey-server` [default: on PATH].
    #[arg(long, help_heading = "Binaries")]
    pub valkey_bin: Option<PathBuf>,
    /// `haproxy` [default: on PATH or /usr/sbin].
    #[arg(long, help_heading = "Binaries")]
    pub haproxy_bin: Option<PathBuf>,
    /// Cargo profile of the workspace binaries.
    #[arg(long, default_value = "release", help_heading = "Binaries")]
    pub profile: String,

    // ---- the scenario ----
    /// When the event happens, as a fraction of the workload's span.
    #[arg(long, default_value_t = 0.5, help_heading = "Scenario")]
    pub event_at: f64,
    /// Down time between a kill and the restart.
    #[arg(long, default_value = "0s", value_parser = parse_duration_or_zero, help_heading = "Scenario")]
    pub down_for: Duration,
    /// Run Valkey as a 3 + 3 cluster (scripts/valkey-cluster.sh); the
    /// routers shard each model over it, and the CPU table shows the
    /// busiest primary against the mean.
    #[arg(long, help_heading = "Scenario")]
    pub valkey_cluster: bool,
    /// Valkey restarts `empty` or from its append-only file (`aof`).
    #[arg(long, default_value = "empty", value_parser = ["empty", "aof"], help_heading = "Scenario")]
    pub valkey_restart: String,

    // ---- the workload ----
    /// trace, rag, chat, system-prompt or no-reuse.
    #[arg(long, default_value = "trace", help_heading = "Workload")]
    pub workload: String,
    /// A Mooncake JSONL trace [default: ../shared/traces/mooncake_synthetic_trace.jsonl].
    #[arg(long, help_heading = "Workload")]
    pub trace: Option<PathBuf>,
    /// Trace: divide timestamps by this.
    #[arg(long, default_value_t = 1.0, help_heading = "Workload")]
    pub speedup: f64,
    /// Trace: replay at most this many entries.
    #[arg(long, help_heading = "Workload")]
    pub limit: Option<usize>,
    /// Trace: skip this many entries first.
    #[arg(long, default_value_t = 0, help_heading = "Workload")]
    pub trace_offset: usize,
    /// Trace: cap on max_tokens (the entry's output_length).
    #[arg(long, default_value_t = 128, help_heading = "Workload")]
    pub max_output_tokens: usize,
    /// Trace: cut prompts to this many tokens [default: what fits one worker's pool].
    #[arg(long, help_heading = "Workload")]
    pub max_input_tokens: Option<usize>,
    /// Trace: send prompts as text (474 seeded words, about 512 Qwen3
    /// tokens, per hash id) instead of token ids, for routers that take
    /// only text (smg, sglang-router).
    #[arg(long, help_heading = "Workload")]
    pub trace_text: bool,
    /// Text workloads: completions or chat.
    #[arg(long, default_value = "chat", help_heading = "Workload")]
    pub api: Api,
    /// Send non-streamed requests (no TTFT).
    #[arg(long, help_heading = "Workload")]
    pub no_stream: bool,
    /// Synthetic: mean requests per second (Poisson).
    #[arg(long, default_value_t = 5.0, help_heading = "Workload")]
    pub rate: f64,
    /// Synthetic: arrivals stop after this.
    #[arg(long, default_value = "60s", value_parser = parse_duration, help_heading = "Workload")]
    pub duration: Duration,
    /// Synthetic: at most this many requests.
    #[arg(long, help_heading = "Workload")]
    pub requests: Option<usize>,
    /// Synthetic: seed of every random choice.
    #[arg(long, default_value_t = 1, help_heading = "Workload")]
    pub seed: u64,
    /// Synthetic: max_tokens of every request.
    #[arg(long, default_value_t = 32, help_heading = "Workload")]
    pub output_tokens: u32,
    /// RAG: documents.
    #[arg(long, default_value_t = 40, help_heading = "Workload")]
    pub documents: usize,
    /// Words per document / no-reuse prompt / first chat message.
    #[arg(long, default_value_t = 1500, help_heading = "Workload")]
    pub doc_words: usize,
    /// RAG: Zipf exponent of document popularity.
    #[arg(long, default_value_t = 1.1, help_heading = "Workload")]
    pub zipf: f64,
    /// Words per question / later chat turn.
    #[arg(long, default_value_t = 30, help_heading = "Workload")]
    pub question_words: usize,
    /// system-prompt: words of the shared system prompt.
    #[arg(long, default_value_t = 2000, help_heading = "Workload")]
    pub system_words: usize,
    /// Chat: turns per session.
    #[arg(long, default_value_t = 6, help_heading = "Workload")]
    pub turns: usize,
    /// Chat: mean pause before the next turn.
    #[arg(long, default_value = "2s", value_parser = parse_duration, help_heading = "Workload")]
    pub think_time: Duration,

    // ---- measuring and output ----
    /// The fleet's measured capacity in requests/s (from `loadtest ramp`
    /// on the same fleet and workload): the report gives the offered load
    /// as a fraction of it.
    #[arg(long, help_heading = "Output")]
    pub capacity: Option<f64>,
    /// Calibration pairs for the router overhead (0: skip).
    #[arg(long, default_value_t = 50, help_heading = "Output")]
    pub calibration: usize,
    /// Width of the time-series windows.
    #[arg(long, default_value = "5s", value_parser = parse_duration, help_heading = "Output")]
    pub window: Duration,
    /// Per-request timeout.
    #[arg(long, default_value = "300s", value_parser = parse_duration, help_heading = "Output")]
    pub request_timeout: Duration,
    /// Output directory [default: target/loadtest/<date>].
    #[arg(long, help_heading = "Output")]
    pub out: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own checks over every subcommand: no two flags of one
    /// command share a name (a flattened `RunArgs` beside a subcommand's
    /// own flag of the same name made `overload` unusable).
    #[test]
    fn every_subcommand_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn overload_takes_the_fleets_capacity() {
        let cli = Cli::try_parse_from(["loadtest", "overload", "--capacity", "12"])
            .expect("overload parses");
        let Command::Overload(args) = cli.command else {
            panic!("not overload");
        };
        assert_eq!(args.run.capacity, Some(12.0));
    }
}
