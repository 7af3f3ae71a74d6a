//! prefix-router: stateless, cache-aware routers for LLM inference that
//! share one prefix index in Valkey. This crate is the `prefix-router`
//! binary: `serve` (the router), and the `reporter` and `inspect`
//! subcommands, which call into the `worker` and `state` crates.
//!
//! Layout, top down (each layer uses only those below it):
//!
//! * `serve`: a router process: one single-threaded runtime per serving
//!   thread, each accepting on the same listeners with its own connections
//!   (thread per core); background loops (leases, gc, load scraping) once
//!   per router; graceful shutdown.
//! * `epp`: `prefix-router epp`, the Gateway API Inference Extension
//!   endpoint picker: Envoy's ext_proc gRPC over the same routing path
//!   (its messages and service, hand-written, public as [`ext_proc`]).
//! * `api`: HTTP handlers (thin): OpenAI routes, the worker push API,
//!   `/admin/*`, auth, connection guards.
//! * `proxy`: the routing path, split by what each part does: the request
//!   pipeline (`pipeline`: the body read once, the response cache,
//!   admission, flow control's gate), the decision (`decision`: the atomic
//!   cache-aware step or a policy over a probe, claims, in-flight counts,
//!   the fallback), the forwarding and stream relay (`forward`,
//!   `inflight`), disaggregated prefill/decode (`pd`), and the endpoint
//!   picker's pick and explain over the same parts.
//! * `flow`: flow control: saturation, the waiting room in each router
//!   and its fleet-wide order in Valkey (priorities, tenants by weight),
//!   shedding; asked by `proxy` right before routing.
//! * `admission`: a request's tenant and class (priority), and its
//!   tenant's fleet-wide limits (requests and tokens per minute, requests
//!   in flight) in Valkey, checked once after the body is parsed, before
//!   routing, by `proxy` for both `serve` and `epp`.
//! * `response_cache`: the optional cache of deterministic completions in
//!   Valkey, asked by `proxy` before routing, replayed byte for byte.
//! * `lmcache`: the LMCache controller as a state source (issue 31): its
//!   lookup of a prompt's tokens (under a deadline, cached briefly) widens
//!   the candidates by what each worker's LMCache holds, on its tier; its
//!   per-instance key counts, polled, break ties. Asked by `proxy`.
//! * `metrics_recorder`: the Prometheus recorder, installed once per process.
//! * `memory`: the allocator set up to hand memory back after oversized
//!   prompts (used by `serve` at start and by `proxy`'s tokenizing pool).
//! * `load_scrape`: optional scraping of workers' `/metrics` for their load.
//! * `telemetry`: the logger, and routing spans exported over OTLP.
//! * `config`: flags, environment and TOML, resolved into [`ServeConfig`]:
//!   plain settings (those of flow control, the response cache and OTLP
//!   are defined here, and interpreted by the layers above).
//! * `models`: the models a router hashes prompts for ([`ModelConfig`]),
//!   their tokenizer files (a directory, or by Hugging Face id from the
//!   hub's cache or the hub: `models::hub`), loaded into the pipelines.
//! * [`routing`]: the policies, pure (nothing of this crate below it):
//!   `cache_aware` (a hit weighted by the KV tier it is held on),
//!   `round_robin`, `least_loaded`, `power_of_two`, `consistent_hash`,
//!   bounded load; and `decode`, the decode pick and skip-prefill rule of
//!   disaggregated serving, and `prefill`, its prefill pick
//!   (`--pd-prefill-policy`).
//! * `error`: `ApiError`, the JSON error body every
//!   HTTP answer of the router uses (`api`, `epp`, the refusals of
//!   `admission` and `flow`).
//! * `periodic`: a background duty run on a period until shutdown.
//! * `hop`: forwarding-loop guards (the `via` mark, own listeners).
//! * `forward_paths`: which `/v1/*` paths reach a worker, and the check
//!   that none can leave `/v1/` (used by `api` and `config`).
//! * `request`: a client's request body read once (`Request`'s
//!   entries and typed fields; the one definition of each field set the
//!   router reads, and of those only the router sets), and the bodies
//!   written from it; taken by `proxy`, `response_cache` and the rest,
//!   never bytes.
//!
//! Below this crate: `tokenize` (prompts to tokens and block hashes),
//! `state` (the Valkey store, `inspect`), `worker` (push client, reporter),
//! `protocol` (wire formats).

mod admission;
mod api;
mod config;
mod epp;
mod error;
mod flow;
mod forward_paths;
mod hop;
mod lmcache;
mod load_scrape;
mod memory;
mod metrics_recorder;
mod models;
mod periodic;
mod proxy;
mod request;
mod response_cache;
pub mod routing;
mod serve;
mod telemetry;

pub use config::{
    AdmissionArgs, AdmissionConfig, BodyMode, EppArgs, EppSettings, ExposureArgs, FlowArgs,
    FlowSettings, GrpcTls, LmCacheArgs, LmCacheSettings, MigrationArgs, MigrationSettings,
    OtlpSettings, ResponseCacheArgs, ResponseCacheSettings, ServeArgs, ServeConfig, StaticWorker,
    TenantConfig, TenantLimits, TenantSource,
};
/// Envoy's ext_proc messages and gRPC service as the endpoint picker
/// speaks them (what a gateway, or a test, sends it and reads back).
pub use epp::wire as ext_proc;
pub use metrics_recorder::metrics_handle;
pub use models::ModelConfig;
pub use protocol::headers::WORKER_HEADER;
pub use response_cache::CACHE_HEADER;
pub use serve::{run, serve_on, serve_with, wait_for_signal};
pub use telemetry::{TelemetryGuard, init as init_telemetry};
