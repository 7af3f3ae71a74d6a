//! prefix-router: stateless, cache-aware routers for LLM inference that
//! share one prefix index in Valkey. This crate is the `prefix-router`
//! binary: `serve` (the router), and the `reporter` and `inspect`
//! subcommands, which call into the `worker` and `state` crates.
//!
//! Layout, top down (each layer uses only those below it):
//!
//! * `serve`: a router process: listeners, background loops (leases, gc,
//!   load scraping), graceful shutdown.
//! * `epp`: `prefix-router epp`, the Gateway API Inference Extension
//!   endpoint picker: Envoy's ext_proc gRPC over the same routing path.
//! * `api`: HTTP handlers (thin): OpenAI routes, the worker push API,
//!   `/admin/*`, auth, JSON errors, connection guards.
//! * `admission`: a request's tenant and class (priority), and its
//!   tenant's fleet-wide limits (requests and tokens per minute, requests
//!   in flight) in Valkey, checked once after the body is parsed, before
//!   routing, by `proxy` for both `serve` and `epp`.
//! * `proxy`: the routing path: prompt → blocks → lookup → policy → claim
//!   → forward, with retries, fallback and in-flight accounting; a model
//!   with prefill and decode workers is served disaggregated (`disagg`:
//!   decode pick and skip decision in `pd_plan`, prefill by the atomic
//!   step over the prefill workers, bodies in `pd_bodies`, the steps
//!   shared with the endpoint picker's two picks in `pd_steps` and
//!   `pd_pick`).
//! * [`routing`]: the policies, pure: `cache_aware` (a hit weighted by the
//!   KV tier it is held on), `round_robin`,
//!   `least_loaded`, `power_of_two`, `consistent_hash`, bounded load; and
//!   `decode`, the decode pick and skip-prefill rule of disaggregated
//!   serving, and `prefill`, its prefill pick (`--pd-prefill-policy`).
//! * `flow`: flow control: saturation, the waiting room in each router
//!   and its fleet-wide order in Valkey (priorities, tenants by weight),
//!   shedding; asked by `proxy` right before routing.
//! * `response_cache`: the optional cache of deterministic completions in
//!   Valkey, asked by `proxy` before routing, replayed byte for byte.
//! * `metrics_recorder`: the Prometheus recorder, installed once per process.
//! * `memory`: the allocator set up to hand memory back after oversized
//!   prompts (used by `serve` at start and by `proxy`'s tokenizing pool).
//! * `load_scrape`: optional scraping of workers' `/metrics` for their load.
//! * `telemetry`: the logger, and routing spans exported over OTLP.
//! * `config`: flags, environment and TOML, resolved into [`ServeConfig`].
//! * `hop`: forwarding-loop guards (the `via` mark, own listeners).
//! * `forward_paths`: which `/v1/*` paths reach a worker, and the check
//!   that none can leave `/v1/` (used by `api` and `config`).
//!
//! Below this crate: `tokenize` (prompts to tokens and block hashes),
//! `state` (the Valkey store, `inspect`), `worker` (push client, reporter),
//! `protocol` (wire formats).

mod admission;
mod api;
mod config;
mod epp;
mod flow;
mod forward_paths;
mod hop;
mod load_scrape;
mod memory;
mod metrics_recorder;
mod proxy;
mod response_cache;
pub mod routing;
mod serve;
mod telemetry;

pub use config::{
    AdmissionArgs, AdmissionConfig, BodyMode, EppArgs, EppSettings, ExposureArgs, FlowArgs,
    GrpcTls, ModelConfig, ResponseCacheArgs, ServeArgs, ServeConfig, StaticWorker, TenantConfig,
    TenantLimits, TenantSource,
};
pub use flow::FlowSettings;
pub use metrics_recorder::metrics_handle;
pub use protocol::headers::WORKER_HEADER;
pub use response_cache::{CACHE_HEADER, Settings as ResponseCacheSettings};
pub use serve::{run, runtime, serve_on, serve_with, wait_for_signal};
pub use telemetry::{OtlpSettings, TelemetryGuard, init as init_telemetry};
