//! The fleet's wire formats, pure: no I/O, no clock, no async. Everything
//! the router, the store, the workers and the simulator must agree on byte
//! for byte is defined here once.
//!
//! Layout (nothing here depends on another crate of the workspace):
//!
//! * [`hashing`]: vLLM's chained block hashes (`sha256_cbor`), the 64-bit
//!   external [`BlockHash`] and its text forms.
//! * [`kv_events`]: vLLM's KV-cache event batches (msgpack), decoded and
//!   encoded; the ZeroMQ sockets that carry them are in `worker`.
//! * [`push`]: the JSON bodies and replies of the worker push API.
//! * `role`: [`WorkerRole`], prefill, decode or both, as a worker
//!   registers it.
//! * `tier`: [`Tier`], the best medium (GPU, CPU, disk) a worker holds a
//!   block on, from a KV event's `medium` label.
//! * [`kv_transfer`]: vLLM's `kv_transfer_params`, the prefill/decode
//!   handshake of disaggregated serving.
//! * [`headers`]: HTTP header names shared by router, simulator and load test.
//! * [`family`]: prefix families, how a model's index splits over Valkey
//!   shards so that a route and its claim stay on one.
//! * [`index`]: which blocks of a chain the shared index holds (anchors
//!   every [`INDEX_STRIDE`] blocks and tips), for routers and workers alike.
//! * `load`: [`WorkerLoad`], a worker's own gauges.
//! * [`vllm_metrics`]: vLLM's load gauges parsed from `GET /metrics`.
//! * `engine_incarnation`: [`EngineIncarnation`], whether an engine
//!   restarted between two scrapes of `GET /metrics`.
//! * `names`: [`check_name`], the rule for model, worker and router names.
//! * `duration`: [`parse_duration`], human durations for flags and TOML.
//! * `redact`: [`redact_url`], a URL without its password, for logs.
//! * `worker_url`: [`check_worker_url`], the shape of a worker's base URL.
//!
//! Within: `family`, `push` and `vllm_metrics` use `hashing` and `load`; `kv_events`
//! uses `hashing`'s digests; `engine_incarnation` uses `vllm_metrics`; `push`
//! uses `role` and `tier`; `family` and `index` use `tier`; `kv_transfer`
//! uses `hashing`.

pub mod family;
pub mod hashing;
pub mod headers;
pub mod index;
pub mod kv_events;
pub mod kv_transfer;
pub mod push;
pub mod vllm_metrics;

mod duration;
mod engine_incarnation;
mod load;
mod names;
mod redact;
mod role;
mod tier;
mod worker_url;

pub use duration::{parse_duration, parse_duration_or_zero};
pub use engine_incarnation::EngineIncarnation;
pub use hashing::BlockHash;
pub use index::INDEX_STRIDE;
pub use load::{MAX_REPORTED_REQUESTS, WorkerLoad};
pub use names::{InvalidName, MAX_NAME_LEN, check_name};
pub use redact::redact_url;
pub use role::{UnknownRole, WorkerRole};
pub use tier::Tier;
pub use worker_url::{InvalidWorkerUrl, MAX_WORKER_URL_LEN, check_worker_url};
