//! `serve` configuration: defaults < TOML file (`--config`) < environment
//! (`PREFIX_ROUTER_*`) < command-line flags.

mod admission;
mod args;
mod costs;
mod debug;
mod defaults;
mod epp;
mod file;
mod flow;
mod flow_settings;
mod lmcache;
mod migration;
mod migration_settings;
mod models;
mod response_cache;
mod static_worker;
mod store;

pub use admission::{AdmissionArgs, AdmissionConfig, TenantConfig, TenantLimits, TenantSource};
pub use args::{ExposureArgs, OtlpSettings, ServeArgs};
pub use epp::{BodyMode, EppArgs, EppSettings, GrpcTls};
pub use flow::FlowArgs;
pub use flow_settings::FlowSettings;
pub use lmcache::{LmCacheArgs, LmCacheSettings};
pub use migration::MigrationArgs;
pub use migration_settings::MigrationSettings;
pub use response_cache::{ResponseCacheArgs, ResponseCacheSettings};
pub use static_worker::StaticWorker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use crate::forward_paths::ForwardPaths;
use crate::models::ModelConfig;

use defaults::{cores, default_max_connections, default_router_id};
use file::{FileConfig, file_duration, load_file};
use store::StoreSettings;

use state::{BatchLimits, ConnectionSettings, ModelLimits, Sharding, StateTtls};

/// Resolved configuration of `serve`. Its `Debug` redacts the Valkey
/// password and the internal token, so that printing it cannot leak them.
#[derive(Clone)]
pub struct ServeConfig {
    /// Address to serve on.
    pub listen: SocketAddr,
    /// Address of the internal listener (`/internal/*`, `/admin/*`,
    /// `/metrics`), when they are kept off `listen`.
    pub internal_listen: Option<SocketAddr>,
    /// Valkey connection.
    pub valkey: ConnectionSettings,
    /// How each model's state is split over shards.
    pub sharding: Sharding,
    /// Key namespace.
    pub key_prefix: String,
    /// Static workers.
    pub workers: Vec<StaticWorker>,
    /// Model of the static workers and of reports that name none.
    pub model: Option<String>,
    /// Tokenizer directory.
    pub tokenizer_dir: Option<PathBuf>,
    /// Bearer token of internal routes; `None` only when explicitly allowed.
    pub internal_token: Option<String>,
    /// This router's id.
    pub router_id: String,
    /// Entry and lease lifetimes.
    pub ttls: StateTtls,
    /// The cap on models and the grace before an empty one is forgotten.
    pub model_limits: ModelLimits,
    /// Batch sizes and caps.
    pub limits: BatchLimits,
    /// Period of gc.
    pub gc_interval: Duration,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Deadline of a request's head, and of its body, from a client.
    pub client_timeout: Duration,
    /// Longest idle wait between a client's requests.
    pub idle_timeout: Duration,
    /// Threads that serve connections, each a single-threaded runtime.
    pub async_threads: usize,
    /// Threads that tokenize and hash prompts.
    pub tokenize_threads: usize,
    /// Prompts that may wait for a tokenizing thread.
    pub tokenize_queue: usize,
    /// Bodies up to this size are tokenized on the serving thread.
    pub tokenize_inline_bytes: usize,
    /// Most client connections open at once, per listener.
    pub max_connections: usize,
    /// Longest prompt routed, in tokens; `None`: each model's context
    /// length (from its tokenizer directory's files), else 1,000,000.
    pub max_prompt_tokens: Option<u64>,
    /// `/v1/*` paths forwarded besides the hashed routes.
    pub forward_paths: ForwardPaths,
    /// Routing policy name.
    pub policy: String,
    /// The engine's block size.
    pub block_size: usize,
    /// The engine's PYTHONHASHSEED, if set.
    pub hash_seed: Option<String>,
    /// Workers tried per request.
    pub max_attempts: usize,
    /// LoRA adapters of --model: (name, path).
    pub loras: Vec<(String, String)>,
    /// Every model this router hashes prompts for: `--model` with
    /// `--tokenizer-dir` (and the top-level block size, seed and LoRAs)
    /// first, then the file's `[[models]]`. Names are unique.
    pub models: Vec<ModelConfig>,
    /// Period of the workers' `/metrics` scrape; `None` when off.
    pub scrape_metrics_interval: Option<Duration>,
    /// The cache-aware policy's weights (`costs`).
    pub cache_aware: crate::routing::CacheAwareConfig,
    /// Disaggregated serving: the share of a prompt a decode worker must
    /// hold beyond which the prefill worker is skipped.
    pub pd_skip_prefill_share: f64,
    /// Disaggregated serving: how the prefill worker is chosen.
    pub pd_prefill_policy: crate::routing::PrefillPolicy,
    /// The endpoint picker's gRPC service, when run as `epp`.
    pub epp: Option<EppSettings>,
    /// The response cache; `None` when off.
    pub response_cache: Option<ResponseCacheSettings>,
    /// Flow control; `None` when off (no saturation threshold).
    pub flow: Option<FlowSettings>,
    /// Mid-stream migration (`--migration-limit`, `--stall-timeout`,
    /// `--migrate-unstreamed`).
    pub migration: MigrationSettings,
    /// Tenants, classes and limits.
    pub admission: AdmissionConfig,
    /// The LMCache controller read as a state source; `None` when off.
    pub lmcache: Option<LmCacheSettings>,
}

impl ServeConfig {
    /// Merges flags (and their env vars) over the file over the defaults.
    pub fn resolve(mut args: ServeArgs) -> anyhow::Result<Self> {
        let mut file = match &args.config {
            Some(p) => load_file(p)?,
            None => FileConfig::default(),
        };
        let cache_aware = costs::cache_aware(&args, &file)?;
        let StoreSettings {
            valkey,
            sharding,
            key_prefix,
            ttls,
            model_limits,
            gc_interval,
        } = store::resolve(&mut args, &mut file)?;
        let workers = if args.workers.is_empty() {
            file.workers
                .iter()
                .map(|w| w.parse().map_err(anyhow::Error::msg))
                .collect::<anyhow::Result<_>>()?
        } else {
            args.workers
        };
        let model = args.model.or(file.model);
        if !workers.is_empty() && model.is_none() {
            bail!("--worker needs --model (the model the static workers serve)");
        }
        let allow_open = args.allow_unauthenticated_internal
            || file.allow_unauthenticated_internal.unwrap_or(false);
        let internal_token = args
            .internal_token
            .or(file.internal_token)
            .filter(|t| !t.is_empty());
        if internal_token.is_none() && !allow_open {
            bail!(
                "no internal token: set --internal-token or PREFIX_ROUTER_INTERNAL_TOKEN (or pass --allow-unauthenticated-internal)"
            );
        }
        let router_id = args
            .router_id
            .or(file.router_id)
            .unwrap_or_else(default_router_id);
        let tokenizer_dir = args.tokenizer_dir.or(file.tokenizer_dir);
        let block_size = args.block_size.or(file.block_size).unwrap_or(16);
        let hash_seed = args.hash_seed.or(file.hash_seed);
        let loras = models::parse_loras(if args.loras.is_empty() {
            file.loras
        } else {
            args.loras
        })?;
        let defaults = models::ModelDefaults {
            block_size,
            hash_seed: hash_seed.clone(),
            revision: args
                .model_revision
                .or(file.model_revision)
                .unwrap_or_else(|| "main".into()),
        };
        let single = models::single_model(&model, &tokenizer_dir, &loras, &defaults, &file.models)?;
        let models = models::resolve_models(single, file.models, &defaults)?;
        let listen = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));
        let internal_listen = args.exposure.internal_listen.or(file.internal_listen);
        if internal_listen == Some(listen) && listen.port() != 0 {
            bail!("--internal-listen {listen} is the --listen address; give it another port");
        }
        let pd_skip_prefill_share = args
            .pd_skip_prefill_share
            .or(file.pd_skip_prefill_share)
            .unwrap_or(0.8);
        if !(0.0..=1.0).contains(&pd_skip_prefill_share) {
            bail!("--pd-skip-prefill-share must be within 0 and 1, got {pd_skip_prefill_share}");
        }
        let pd_prefill_policy = match args.pd_prefill_policy.or(file.pd_prefill_policy) {
            Some(p) => p
                .parse()
                .map_err(|e| anyhow::anyhow!("--pd-prefill-policy: {e}"))?,
            None => crate::routing::PrefillPolicy::default(),
        };
        let max_connections = args
            .exposure
            .max_connections
            .or(file.max_connections)
            .unwrap_or_else(default_max_connections);
        if max_connections == 0 {
            bail!("--max-connections must be positive");
        }
        let async_threads = args
            .exposure
            .async_threads
            .or(file.async_threads)
            .unwrap_or_else(cores);
        if async_threads == 0 {
            bail!("--async-threads must be positive");
        }
        let own = [Some(listen), internal_listen];
        let own: Vec<SocketAddr> = own.into_iter().flatten().collect();
        if let Some(w) = workers
            .iter()
            .find(|w| crate::hop::is_own_listener(&w.url, &own))
        {
            bail!(
                "--worker {}={} is this router's own listener: requests would loop",
                w.id,
                w.url
            );
        }
        let max_prompt_tokens = args.exposure.max_prompt_tokens.or(file.max_prompt_tokens);
        if max_prompt_tokens == Some(0) {
            bail!("--max-prompt-tokens must be positive");
        }
        let response_cache = response_cache::resolve(
            &args.response_cache,
            response_cache::FileKeys {
                ttl: file.response_cache_ttl,
                max_entry_bytes: file.response_cache_max_entry_bytes,
                max_bytes: file.response_cache_max_bytes,
            },
        )?;
        let migration = migration::resolve(&args.migration)?;
        let lmcache = lmcache::resolve(
            &args.lmcache,
            lmcache::FileKeys {
                controller: file.lmcache_controller,
                instance_map: file.lmcache_instance_map,
                lookup_min_tokens: file.lmcache_lookup_min_tokens,
                deadline: file.lmcache_deadline,
                poll_interval: file.lmcache_poll_interval,
            },
        )?;
        let flow = flow::resolve(
            &args.flow,
            flow::FileKeys {
                max_in_flight_per_worker: file.max_in_flight_per_worker,
                saturation_waiting: file.saturation_waiting,
                saturation_kv_usage: file.saturation_kv_usage,
                saturation_prefill_tokens: file.saturation_prefill_tokens,
                max_queued: file.max_queued,
                queue_timeout: file.queue_timeout,
                band_queue_timeouts: file.band_queue_timeouts,
            },
            crate::routing::STALE_LOAD,
        )?;
        let admission = admission::resolve(
            &args.admission,
            admission::FileKeys {
                tenant_header: file.tenant_header,
                tenant_from_user: file.tenant_from_user,
                tenant_requests_per_minute: file.tenant_requests_per_minute,
                tenant_tokens_per_minute: file.tenant_tokens_per_minute,
                tenant_max_concurrent: file.tenant_max_concurrent,
                objectives: file.objectives,
                pass_priority: file.pass_priority,
                default_max_tokens: file.default_max_tokens,
                rate_limit_window: file.rate_limit_window,
                tenants: file.tenants,
            },
        )?;
        let forward_paths = ForwardPaths::new(if args.exposure.forward_paths.is_empty() {
            &file.forward_paths
        } else {
            &args.exposure.forward_paths
        })
        .map_err(anyhow::Error::msg)?;
        Ok(ServeConfig {
            listen,
            internal_listen,
            valkey,
            sharding,
            key_prefix,
            workers,
            model,
            tokenizer_dir,
            internal_token,
            router_id,
            ttls,
            model_limits,
            limits: BatchLimits::default(),
            gc_interval,
            max_body_bytes: args
                .max_body_bytes
                .or(file.max_body_bytes)
                .unwrap_or(16 << 20),
            client_timeout: args
                .exposure
                .client_timeout
                .or(file_duration(file.client_timeout, "client_timeout")?)
                .unwrap_or(Duration::from_secs(30)),
            idle_timeout: args
                .exposure
                .idle_timeout
                .or(file_duration(file.idle_timeout, "idle_timeout")?)
                .unwrap_or(Duration::from_secs(60)),
            max_connections,
            async_threads,
            tokenize_threads: args
                .exposure
                .tokenize_threads
                .or(file.tokenize_threads)
                .unwrap_or_else(|| (cores() / 2).max(1))
                .max(1),
            tokenize_queue: args
                .exposure
                .tokenize_queue
                .or(file.tokenize_queue)
                .unwrap_or(64),
            tokenize_inline_bytes: args
                .exposure
                .tokenize_inline_bytes
                .or(file.tokenize_inline_bytes)
                .unwrap_or(0),
            max_prompt_tokens,
            forward_paths,
            policy: args
                .policy
                .or(file.policy)
                .unwrap_or_else(|| "cache_aware".into()),
            block_size,
            hash_seed,
            max_attempts: args.max_attempts.or(file.max_attempts).unwrap_or(3),
            cache_aware,
            pd_skip_prefill_share,
            pd_prefill_policy,
            loras,
            models,
            scrape_metrics_interval: args.scrape_metrics_interval.or(file_duration(
                file.scrape_metrics_interval,
                "scrape_metrics_interval",
            )?),
            epp: None,
            response_cache,
            flow,
            migration,
            admission,
            lmcache,
        })
    }
}
