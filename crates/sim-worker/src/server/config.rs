//! [`SimConfig`]: everything a simulated worker is started with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::{EngineConfig, Tiers};
use protocol::WorkerRole;
use worker::kv_events::SocketMode;

/// One simulated vLLM replica.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// HTTP address (port 0 picks a free port; see `SimServer::addr`).
    pub listen: SocketAddr,
    /// The worker's id in the fleet, also sent as `x-sim-worker`.
    pub worker_id: String,
    /// The served model name (`--served-model-name` in vLLM).
    pub model: String,
    /// The model's `tokenizer.json` and `tokenizer_config.json`.
    pub tokenizer_dir: PathBuf,
    /// vLLM's `PYTHONHASHSEED`, if set (it seeds the block hashes).
    pub hash_seed: Option<String>,
    /// Pool size, batch size, block size and time model.
    pub engine: EngineConfig,
    /// Its role in a prefill/decode-disaggregated fleet: which
    /// `kv_transfer_params` it honours (`server::disagg`), registered in its
    /// heartbeat. `Both` ignores them, as the sim always did.
    pub role: WorkerRole,
    /// The CPU tier and the KV transfer model.
    pub tiers: Tiers,
    /// Output tokens when a request gives no `max_tokens`.
    pub default_max_tokens: usize,
    /// The text the answers' tokens are drawn from (tokenized at start;
    /// see [`Vocabulary`](crate::Vocabulary)).
    pub vocabulary: String,
    /// Reporting to the fleet over HTTP, if enabled.
    pub push: Option<PushSettings>,
    /// vLLM KV events over ZeroMQ, if enabled.
    pub kv_events: Option<KvEventsSettings>,
    /// Faults in force at start.
    pub faults: FaultSettings,
    /// An LMCache beside the engine, reporting to a real controller; its
    /// CPU tier is then hidden from the push reports and KV events.
    pub lmcache: Option<LmcacheSettings>,
}

impl SimConfig {
    /// Defaults for `model`, tokenized from `tokenizer_dir`: loopback port
    /// 0, worker id `sim-0`, vLLM's engine defaults (see
    /// [`EngineConfig::default`]), both roles, no CPU tier, 16 output
    /// tokens drawn from [`DEFAULT_VOCABULARY`], no reporting, no faults.
    pub fn new(model: impl Into<String>, tokenizer_dir: impl Into<PathBuf>) -> Self {
        SimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            worker_id: "sim-0".into(),
            model: model.into(),
            tokenizer_dir: tokenizer_dir.into(),
            hash_seed: None,
            engine: EngineConfig::default(),
            role: WorkerRole::Both,
            tiers: Tiers::default(),
            default_max_tokens: 16,
            vocabulary: DEFAULT_VOCABULARY.into(),
            push: None,
            kv_events: None,
            faults: FaultSettings::default(),
            lmcache: None,
        }
    }
}

/// An LMCache controller to report the engine's tiers to, in LMCache's
/// chunk keys (see `crate::lmcache`): its host and the three ports of its
/// `--monitor-ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LmcacheSettings {
    /// The controller's host.
    pub host: String,
    /// Its `pull` port (chunk admits and evicts).
    pub pull_port: u16,
    /// Its `reply` port (registration).
    pub reply_port: u16,
    /// Its `heartbeat` port.
    pub heartbeat_port: u16,
    /// The LMCache `instance_id` reported (the router maps it to a worker).
    pub instance_id: String,
}

impl LmcacheSettings {
    /// `HOST:PULL:REPLY:HEARTBEAT` for `instance_id`.
    pub fn parse(spec: &str, instance_id: &str) -> Result<Self, String> {
        let bad = || format!("{spec:?}: expected HOST:PULL:REPLY:HEARTBEAT");
        let mut parts = spec.rsplitn(4, ':');
        let mut port =
            || -> Result<u16, String> { parts.next().ok_or_else(bad)?.parse().map_err(|_| bad()) };
        let (heartbeat_port, reply_port, pull_port) = (port()?, port()?, port()?);
        let host = parts.next().filter(|h| !h.is_empty()).ok_or_else(bad)?;
        Ok(LmcacheSettings {
            host: host.to_owned(),
            pull_port,
            reply_port,
            heartbeat_port,
            instance_id: instance_id.to_owned(),
        })
    }

    /// `tcp://host:port`.
    pub fn endpoint(&self, port: u16) -> String {
        format!("tcp://{}:{port}", self.host)
    }
}

/// The text a sim's answers are drawn from unless told otherwise.
pub const DEFAULT_VOCABULARY: &str =
    " the quick brown fox jumps over a lazy dog while seven small birds sing";

/// Reporting through the fleet's push API (a [`Pusher`](worker::push::Pusher)).
#[derive(Debug, Clone)]
pub struct PushSettings {
    /// Any router, or the balancer in front of them.
    pub fleet_url: String,
    /// The fleet's internal token.
    pub token: Option<String>,
    /// The URL routers reach this worker at; `None`: `http://<bound addr>`.
    pub advertise_url: Option<String>,
    /// Period of stored/evicted flushes.
    pub flush_interval: Duration,
    /// Period of full snapshots.
    pub sync_interval: Duration,
    /// Period of heartbeats.
    pub heartbeat_interval: Duration,
    /// Seed of the eviction-drop fault.
    pub seed: u64,
}

impl PushSettings {
    /// The protocol's periods (100 ms, 5 s, 1 s) for `fleet_url`.
    pub fn new(fleet_url: impl Into<String>, token: Option<String>) -> Self {
        PushSettings {
            fleet_url: fleet_url.into(),
            token,
            advertise_url: None,
            flush_interval: Duration::from_millis(100),
            sync_interval: Duration::from_secs(5),
            heartbeat_interval: Duration::from_secs(1),
            seed: 0,
        }
    }
}

/// Publishing vLLM's KV events (a [`KvEventPublisher`](worker::kv_events::KvEventPublisher)).
#[derive(Debug, Clone)]
pub struct KvEventsSettings {
    /// The PUB endpoint, e.g. `tcp://127.0.0.1:5557` (port 0 picks one).
    pub endpoint: String,
    /// Bind (default) or connect the PUB socket.
    pub mode: SocketMode,
    /// The replay ROUTER endpoint; `None` disables replay.
    pub replay_endpoint: Option<String>,
    /// Topic of every message (vLLM's default `""`).
    pub topic: String,
    /// Batches kept for replay (vLLM's default 10,000).
    pub buffer_steps: usize,
}

impl KvEventsSettings {
    /// Binds `endpoint`, no replay, empty topic, vLLM's buffer size.
    pub fn new(endpoint: impl Into<String>) -> Self {
        KvEventsSettings {
            endpoint: endpoint.into(),
            mode: SocketMode::Bind,
            replay_endpoint: None,
            topic: String::new(),
            buffer_steps: 10_000,
        }
    }
}

/// Faults that can be set at start (and flipped at run time through
/// `POST /sim/faults`).
#[derive(Debug, Clone, Default)]
pub struct FaultSettings {
    /// Probability that an evicted hash goes unreported (push and KV events).
    pub drop_evictions: f64,
    /// Send no reports at all: no heartbeats, flushes, syncs or KV events.
    pub stop_reporting: bool,
    /// Answer nothing: requests hang until unpaused (`/sim/*` still works).
    pub paused: bool,
    /// Exit abruptly this long after start, like `kill -9`.
    pub crash_after: Option<Duration>,
    /// Break every answer after some tokens (tests of mid-stream failure).
    pub stream_fault: Option<StreamFault>,
}

/// Every answer breaks once it has sent `after_tokens` output tokens of a
/// choice (answers shorter than that are not touched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct StreamFault {
    /// Output tokens sent before it breaks.
    pub after_tokens: usize,
    /// How it breaks.
    pub kind: StreamFaultKind,
}

/// How an answer breaks ([`StreamFault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamFaultKind {
    /// The connection is cut (no final chunk, no `[DONE]`).
    Cut,
    /// vLLM's error event inside the stream, then `[DONE]` (a
    /// non-streamed answer: a 500).
    Error,
    /// The whole process exits at once (status 137), like `kill -9`.
    Crash,
}

impl std::str::FromStr for StreamFault {
    type Err = String;

    /// `cut:N`, `error:N` or `crash:N`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, n) = s
            .split_once(':')
            .ok_or_else(|| format!("expected KIND:TOKENS (cut:3, error:3, crash:3), got {s:?}"))?;
        let kind = match kind {
            "cut" => StreamFaultKind::Cut,
            "error" => StreamFaultKind::Error,
            "crash" => StreamFaultKind::Crash,
            other => {
                return Err(format!(
                    "unknown stream fault {other:?}: cut, error or crash"
                ));
            }
        };
        let after_tokens = n
            .parse()
            .map_err(|e| format!("stream fault token count {n:?}: {e}"))?;
        Ok(StreamFault { after_tokens, kind })
    }
}
