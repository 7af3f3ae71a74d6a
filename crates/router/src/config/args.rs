//! The flags of `prefix-router serve` ([`ServeArgs`]), as clap parses them;
//! [`super::ServeConfig::resolve`] layers them over the file and defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use protocol::parse_duration;

use super::StaticWorker;
use super::admission::AdmissionArgs;
use super::flow::FlowArgs;
use super::lmcache::LmCacheArgs;
use super::migration::MigrationArgs;
use super::response_cache::ResponseCacheArgs;

/// Flags of `prefix-router serve`; each also reads `PREFIX_ROUTER_<NAME>`.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "PREFIX_ROUTER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to serve on [default: 127.0.0.1:8080].
    #[arg(long, env = "PREFIX_ROUTER_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Valkey URL: redis://, rediss://, valkey:// or valkeys://; user,
    /// password and TLS go in the URL [default: redis://127.0.0.1:6379].
    /// Several URLs, comma separated, are the seeds of a Valkey Cluster.
    #[arg(long, env = "PREFIX_ROUTER_VALKEY", hide_env_values = true)]
    pub valkey: Option<String>,
    /// Shards (parts) each model's state is split into, by prefix family
    /// [default: 1 on one server, 6 on a cluster]. Every router of a fleet
    /// must use the same value.
    #[arg(long, env = "PREFIX_ROUTER_SHARDS")]
    pub shards: Option<usize>,
    /// Prefix family depth in blocks: a prompt's shard is chosen by its
    /// block at this position, blocks before it are written to every shard
    /// [default: 1]. Routers and workers must agree.
    #[arg(long, env = "PREFIX_ROUTER_FAMILY_BLOCKS")]
    pub family_blocks: Option<usize>,
    /// Namespace of every key, so that several fleets share one Valkey [default: pr].
    #[arg(long, env = "PREFIX_ROUTER_KEY_PREFIX")]
    pub key_prefix: Option<String>,
    /// A static worker `[ID=]URL` (repeatable; comma-separated in the env).
    #[arg(long = "worker", env = "PREFIX_ROUTER_WORKERS", value_delimiter = ',')]
    pub workers: Vec<StaticWorker>,
    /// The model of the static workers, and of reports that name none.
    #[arg(long, env = "PREFIX_ROUTER_MODEL")]
    pub model: Option<String>,
    /// Directory with the model's tokenizer.json and tokenizer_config.json
    /// [default: a Hugging Face `--model` id's files, from the local
    /// Hugging Face cache or the hub].
    #[arg(long, env = "PREFIX_ROUTER_TOKENIZER_DIR")]
    pub tokenizer_dir: Option<PathBuf>,
    /// The revision (branch, tag or commit) of a Hugging Face `--model` id
    /// [default: main].
    #[arg(long, env = "PREFIX_ROUTER_MODEL_REVISION")]
    pub model_revision: Option<String>,
    /// Bearer token of the internal and admin routes.
    #[arg(long, env = "PREFIX_ROUTER_INTERNAL_TOKEN", hide_env_values = true)]
    pub internal_token: Option<String>,
    /// Serve internal routes without a token (loudly logged; tests only).
    #[arg(long, env = "PREFIX_ROUTER_ALLOW_UNAUTHENTICATED_INTERNAL")]
    pub allow_unauthenticated_internal: bool,
    /// This router's id, unique per process [default: <hostname>-<pid>-<random>].
    #[arg(long, env = "PREFIX_ROUTER_ROUTER_ID")]
    pub router_id: Option<String>,
    /// Life of a speculative (routed, unconfirmed) entry [default: 30s].
    #[arg(long, env = "PREFIX_ROUTER_SPECULATIVE_TTL", value_parser = parse_duration)]
    pub speculative_ttl: Option<Duration>,
    /// Life of a confirmed entry, refreshed by every sync [default: 10m].
    #[arg(long, env = "PREFIX_ROUTER_CONFIRMED_TTL", value_parser = parse_duration)]
    pub confirmed_ttl: Option<Duration>,
    /// A worker without heartbeat leaves routing after this [default: 15s].
    #[arg(long, env = "PREFIX_ROUTER_WORKER_LEASE", value_parser = parse_duration)]
    pub worker_lease: Option<Duration>,
    /// A crashed router's in-flight counts expire after this [default: 15s].
    #[arg(long, env = "PREFIX_ROUTER_ROUTER_LEASE", value_parser = parse_duration)]
    pub router_lease: Option<Duration>,
    /// Period of the gc pass over every model [default: 1s].
    #[arg(long, env = "PREFIX_ROUTER_GC_INTERVAL", value_parser = parse_duration)]
    pub gc_interval: Option<Duration>,
    /// Deadline of a routing call to Valkey, then fallback routing [default: 20ms].
    #[arg(long, env = "PREFIX_ROUTER_VALKEY_TIMEOUT", value_parser = parse_duration)]
    pub valkey_timeout: Option<Duration>,
    /// Largest request body accepted, in bytes [default: 16777216].
    #[arg(long, env = "PREFIX_ROUTER_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Routing policy: cache_aware, round_robin, least_loaded, consistent_hash [default: cache_aware].
    #[arg(long, env = "PREFIX_ROUTER_POLICY")]
    pub policy: Option<String>,
    /// The engine's KV block size in tokens (vLLM --block-size) [default: 16].
    #[arg(long, env = "PREFIX_ROUTER_BLOCK_SIZE")]
    pub block_size: Option<usize>,
    /// The engine's PYTHONHASHSEED, if it sets one (it seeds the block hashes).
    #[arg(long, env = "PREFIX_ROUTER_HASH_SEED")]
    pub hash_seed: Option<String>,
    /// Workers tried per request before giving up [default: 3].
    #[arg(long, env = "PREFIX_ROUTER_MAX_ATTEMPTS")]
    pub max_attempts: Option<usize>,
    /// Bounded load: no affinity above (1 + ε) × the mean load [default: 0.25].
    #[arg(long, env = "PREFIX_ROUTER_EPSILON")]
    pub epsilon: Option<f64>,
    /// What one request ahead in a worker's queue costs, in prompt tokens to
    /// prefill: the weight of load against locality [default: 512].
    #[arg(long, env = "PREFIX_ROUTER_QUEUE_COST_TOKENS")]
    pub queue_cost_tokens: Option<f64>,
    /// The engines' `--max-num-seqs`: requests beyond it wait in a
    /// worker's queue for a place in the batch [default: 256].
    #[arg(long, env = "PREFIX_ROUTER_MAX_NUM_SEQS")]
    pub max_num_seqs: Option<u64>,
    /// What each request in a worker's batch costs, in prompt tokens: a
    /// larger batch makes every engine step longer [default: 16].
    #[arg(long, env = "PREFIX_ROUTER_BATCH_COST_TOKENS")]
    pub batch_cost_tokens: Option<f64>,
    /// Weight of a request's own uncached tokens against the prefills
    /// queued before it: a prefill also delays the requests that come
    /// after it to the same worker [default: 3].
    #[arg(long, env = "PREFIX_ROUTER_UNCACHED_WEIGHT")]
    pub uncached_weight: Option<f64>,
    /// What a prompt token a worker holds on its CPU tier is worth against
    /// one on its GPU, 0 to 1: the prefill is saved, the load back is not
    /// [default: 0.5].
    #[arg(long, env = "PREFIX_ROUTER_TIER_WEIGHT_CPU")]
    pub tier_weight_cpu: Option<f64>,
    /// What a prompt token a worker holds on disk (or any slower tier) is
    /// worth against one on its GPU, 0 to 1 [default: 0.25].
    #[arg(long, env = "PREFIX_ROUTER_TIER_WEIGHT_DISK")]
    pub tier_weight_disk: Option<f64>,
    /// Disaggregated serving: a decode worker holding more than this share
    /// of a prompt (0 to 1) computes it without a prefill worker
    /// [default: 0.8].
    #[arg(long, env = "PREFIX_ROUTER_PD_SKIP_PREFILL_SHARE")]
    pub pd_skip_prefill_share: Option<f64>,
    /// Disaggregated serving: how the prefill worker is chosen,
    /// `cache_aware` (matched prefix against queued prefill) or
    /// `least_loaded` (queued prefill alone, caches ignored)
    /// [default: cache_aware].
    #[arg(long, env = "PREFIX_ROUTER_PD_PREFILL_POLICY")]
    pub pd_prefill_policy: Option<String>,
    /// A LoRA adapter `NAME=PATH` the engines serve for --model (repeatable):
    /// requests naming it are hashed with it, as vLLM does.
    #[arg(long = "lora", env = "PREFIX_ROUTER_LORAS", value_delimiter = ',')]
    pub loras: Vec<String>,
    /// Scrape every live worker's `/metrics` for its load this often
    /// [default: off].
    #[arg(long, env = "PREFIX_ROUTER_SCRAPE_METRICS_INTERVAL", value_parser = parse_duration)]
    pub scrape_metrics_interval: Option<Duration>,
    /// Most models in the fleet; a worker of one more is refused (429
    /// `too_many_models`) [default: 1024].
    #[arg(long, env = "PREFIX_ROUTER_MAX_MODELS")]
    pub max_models: Option<usize>,
    /// A model without any worker this long is forgotten with its keys
    /// [default: 10m].
    #[arg(long, env = "PREFIX_ROUTER_MODEL_GRACE", value_parser = parse_duration)]
    pub model_grace: Option<Duration>,
    /// What the router exposes to clients: its internal listener and its
    /// limits on slow or oversized requests. Boxed to keep `ServeArgs` (a
    /// variant of the binary's command enum) small.
    #[command(flatten)]
    pub exposure: Box<ExposureArgs>,
    /// The optional response cache (boxed, as `exposure`).
    #[command(flatten)]
    pub response_cache: Box<ResponseCacheArgs>,
    /// Flow control: saturation and the waiting room (boxed, as `exposure`).
    #[command(flatten)]
    pub flow: Box<FlowArgs>,
    /// Mid-stream migration.
    #[command(flatten)]
    pub migration: MigrationArgs,
    /// LMCache as a state source (boxed, as `exposure`).
    #[command(flatten)]
    pub lmcache: Box<LmCacheArgs>,
    /// Tenants, classes and their limits (boxed, as `exposure`).
    #[command(flatten)]
    pub admission: Box<AdmissionArgs>,
}

/// Flags of `serve` about the router's exposure to clients (flattened into
/// [`ServeArgs`]).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ExposureArgs {
    /// A second address for the worker push API and operator routes
    /// (`/internal/*`, `/admin/*`, `/metrics`); when set, they are served
    /// only there, so the push port can be kept off the public balancer
    /// [default: off, everything on --listen].
    #[arg(long, env = "PREFIX_ROUTER_INTERNAL_LISTEN")]
    pub internal_listen: Option<SocketAddr>,
    /// A client must send a request's head within this (from connecting,
    /// or from the request's first byte), and its body within this again;
    /// slower clients are cut off [default: 30s].
    #[arg(long, env = "PREFIX_ROUTER_CLIENT_TIMEOUT", value_parser = parse_duration)]
    pub client_timeout: Option<Duration>,
    /// Longest prompt routed, in tokens; longer ones get a 413 before any
    /// state is written [default: the model's context length, the largest
    /// of its `config.json`'s `max_position_embeddings` (times its
    /// `rope_scaling` factor) and its `tokenizer_config.json`'s
    /// `model_max_length`; 1000000 for a model without them].
    #[arg(long, env = "PREFIX_ROUTER_MAX_PROMPT_TOKENS")]
    pub max_prompt_tokens: Option<u64>,
    /// Threads that serve connections and relay responses [default: one
    /// per core]. Each is a single-threaded runtime accepting on the same
    /// sockets, with its own connections to Valkey and to workers (thread
    /// per core: an event wakes only its thread). 1 serves about one
    /// core's worth of relaying. Tokenizing and hashing keep their own
    /// threads either way.
    #[arg(long, env = "PREFIX_ROUTER_ASYNC_THREADS")]
    pub async_threads: Option<usize>,
    /// Threads that tokenize and hash large prompts (over 64 KiB), off the
    /// async workers; smaller ones have a lane of their own [default: half
    /// the cores, at least 1].
    #[arg(long, env = "PREFIX_ROUTER_TOKENIZE_THREADS")]
    pub tokenize_threads: Option<usize>,
    /// Large prompts that may wait for a tokenizing thread; past that a
    /// request gets a 503 `tokenizer_busy` at once [default: 64].
    #[arg(long, env = "PREFIX_ROUTER_TOKENIZE_QUEUE")]
    pub tokenize_queue: Option<usize>,
    /// Request bodies up to this size are parsed, tokenized and hashed on
    /// the serving thread itself rather than handed to a tokenizing thread
    /// and back (two thread wake-ups). Worth it only for bodies that cost
    /// less than the hop: up to about 4 KiB of token ids, about 100 bytes
    /// of text [default: 0, every one handed over].
    #[arg(long, env = "PREFIX_ROUTER_TOKENIZE_INLINE_BYTES")]
    pub tokenize_inline_bytes: Option<usize>,
    /// Longest wait for the next request on a kept-alive client connection;
    /// idle connections are closed after it [default: 60s].
    #[arg(long, env = "PREFIX_ROUTER_IDLE_TIMEOUT", value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// Most client connections open at once per listener; more get a 503
    /// and are closed [default: half the open-file limit, at most 10000].
    #[arg(long, env = "PREFIX_ROUTER_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// OTLP/HTTP collector that routing spans are exported to, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (`http://collector:4318`, plain HTTP;
    /// spans go to `/v1/traces`); a flag or the environment only [default:
    /// off].
    #[arg(long, env = "PREFIX_ROUTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Share of new traces exported, 0 to 1; a client's sampling decision
    /// in its `traceparent` is followed [default: 1].
    #[arg(long, env = "PREFIX_ROUTER_OTLP_SAMPLE_RATIO")]
    pub otlp_sample_ratio: Option<f64>,
    /// A `/v1/*` path forwarded to workers besides vLLM's inference routes
    /// (repeatable): `/v1/name`, or `/v1/prefix/*` for any path below it.
    #[arg(
        long = "forward-path",
        env = "PREFIX_ROUTER_FORWARD_PATHS",
        value_delimiter = ','
    )]
    pub forward_paths: Vec<String>,
}

impl ExposureArgs {
    /// The span export these flags ask for, if any.
    pub fn otlp(&self) -> anyhow::Result<Option<OtlpSettings>> {
        let Some(endpoint) = self.otlp_endpoint.clone() else {
            return Ok(None);
        };
        // The exporter is built without TLS: a collector beside the router
        // (a sidecar or node agent) takes plain OTLP/HTTP.
        if !endpoint.starts_with("http://") {
            anyhow::bail!(
                "--otlp-endpoint {endpoint:?}: expected an http:// URL (OTLP over TLS is not built in; send to a local collector)"
            );
        }
        let sample_ratio = self.otlp_sample_ratio.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&sample_ratio) {
            anyhow::bail!("--otlp-sample-ratio {sample_ratio}: expected 0 to 1");
        }
        Ok(Some(OtlpSettings {
            endpoint,
            sample_ratio,
            service_name: "prefix-router".into(),
        }))
    }
}

/// Where and how much to export.
#[derive(Debug, Clone)]
pub struct OtlpSettings {
    /// The collector's OTLP/HTTP base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (`http://collector:4318`); spans go to `<endpoint>/v1/traces`.
    pub endpoint: String,
    /// Share of new traces sampled (a client's sampled flag is followed).
    pub sample_ratio: f64,
    /// The `service.name` resource attribute.
    pub service_name: String,
}
