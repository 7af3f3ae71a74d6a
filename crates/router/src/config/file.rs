//! The TOML configuration file of `serve`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

use protocol::parse_duration;

use super::models;

/// The TOML file: the same settings as the flags, durations as strings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) listen: Option<SocketAddr>,
    pub(super) internal_listen: Option<SocketAddr>,
    pub(super) valkey: Option<String>,
    pub(super) shards: Option<usize>,
    pub(super) family_blocks: Option<usize>,
    pub(super) key_prefix: Option<String>,
    #[serde(default)]
    pub(super) workers: Vec<String>,
    pub(super) model: Option<String>,
    pub(super) tokenizer_dir: Option<PathBuf>,
    pub(super) model_revision: Option<String>,
    pub(super) internal_token: Option<String>,
    pub(super) allow_unauthenticated_internal: Option<bool>,
    pub(super) router_id: Option<String>,
    pub(super) speculative_ttl: Option<String>,
    pub(super) confirmed_ttl: Option<String>,
    pub(super) worker_lease: Option<String>,
    pub(super) router_lease: Option<String>,
    pub(super) gc_interval: Option<String>,
    pub(super) valkey_timeout: Option<String>,
    pub(super) max_body_bytes: Option<usize>,
    pub(super) client_timeout: Option<String>,
    pub(super) idle_timeout: Option<String>,
    pub(super) async_threads: Option<usize>,
    pub(super) tokenize_threads: Option<usize>,
    pub(super) tokenize_queue: Option<usize>,
    pub(super) tokenize_inline_bytes: Option<usize>,
    pub(super) max_connections: Option<usize>,
    pub(super) max_prompt_tokens: Option<u64>,
    pub(super) policy: Option<String>,
    pub(super) block_size: Option<usize>,
    pub(super) hash_seed: Option<String>,
    pub(super) max_attempts: Option<usize>,
    pub(super) epsilon: Option<f64>,
    pub(super) queue_cost_tokens: Option<f64>,
    pub(super) max_num_seqs: Option<u64>,
    pub(super) batch_cost_tokens: Option<f64>,
    pub(super) uncached_weight: Option<f64>,
    pub(super) tier_weight_cpu: Option<f64>,
    pub(super) tier_weight_disk: Option<f64>,
    pub(super) pd_skip_prefill_share: Option<f64>,
    pub(super) pd_prefill_policy: Option<String>,
    #[serde(default)]
    pub(super) loras: Vec<String>,
    pub(super) scrape_metrics_interval: Option<String>,
    // LMCache (config/lmcache.rs).
    pub(super) lmcache_controller: Option<String>,
    #[serde(default)]
    pub(super) lmcache_instance_map: Vec<String>,
    pub(super) lmcache_lookup_min_tokens: Option<u64>,
    pub(super) lmcache_deadline: Option<String>,
    pub(super) lmcache_poll_interval: Option<String>,
    pub(super) max_models: Option<usize>,
    pub(super) model_grace: Option<String>,
    #[serde(default)]
    pub(super) forward_paths: Vec<String>,
    /// `epp` only (see [`super::EppArgs`]); `serve` ignores them.
    pub(super) grpc_listen: Option<SocketAddr>,
    pub(super) epp_body_mode: Option<super::BodyMode>,
    pub(super) epp_response_timeout: Option<String>,
    pub(super) epp_max_streams: Option<usize>,
    pub(super) grpc_tls_cert: Option<PathBuf>,
    pub(super) grpc_tls_key: Option<PathBuf>,
    pub(super) grpc_tls_client_ca: Option<PathBuf>,
    pub(super) response_cache_ttl: Option<String>,
    pub(super) response_cache_max_entry_bytes: Option<usize>,
    pub(super) response_cache_max_bytes: Option<u64>,
    pub(super) max_in_flight_per_worker: Option<u64>,
    pub(super) saturation_waiting: Option<u64>,
    pub(super) saturation_kv_usage: Option<f64>,
    pub(super) saturation_prefill_tokens: Option<u64>,
    pub(super) max_queued: Option<usize>,
    pub(super) queue_timeout: Option<String>,
    /// Priority (as a string key) → longest wait.
    #[serde(default)]
    pub(super) band_queue_timeouts: std::collections::BTreeMap<String, String>,
    /// More base models, each with its own tokenizer (`[[models]]`).
    #[serde(default)]
    pub(super) models: Vec<models::FileModel>,
    // Admission (config/admission.rs).
    pub(super) tenant_header: Option<String>,
    pub(super) tenant_from_user: Option<bool>,
    pub(super) tenant_requests_per_minute: Option<u64>,
    pub(super) tenant_tokens_per_minute: Option<u64>,
    pub(super) tenant_max_concurrent: Option<u64>,
    /// `[objectives]`: name = priority.
    #[serde(default)]
    pub(super) objectives: std::collections::BTreeMap<String, i64>,
    pub(super) pass_priority: Option<bool>,
    pub(super) default_max_tokens: Option<u64>,
    pub(super) rate_limit_window: Option<String>,
    /// `[[tenants]]`: name, weight and limits of named tenants.
    #[serde(default)]
    pub(super) tenants: Vec<super::admission::FileTenant>,
}

pub(super) fn file_duration(v: Option<String>, name: &str) -> anyhow::Result<Option<Duration>> {
    v.map(|s| {
        parse_duration(&s)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("config key {name}"))
    })
    .transpose()
}

/// The file's settings. A parse error is reported by message and position
/// only: toml's own rendering quotes the offending line, which may be the
/// one holding `internal_token` or a Valkey URL with its password.
pub(super) fn load_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        let at = e.span().map_or_else(String::new, |span| {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!(" (line {line}, column {column})")
        });
        anyhow::anyhow!("parsing {}: {}{at}", path.display(), e.message().trim_end())
    })
}
