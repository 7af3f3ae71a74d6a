//! The client side of the worker push protocol: how a worker (the simulated
//! one, or the reporter sidecar next to a stock vLLM) tells the fleet what
//! its prefix cache holds.
//!
//! * [`FleetClient`]: the HTTP calls of `/internal/*` (heartbeat, stored,
//!   eviction, chunked sync, deregister in `client`; a flush's reports in
//!   one `events` request, or the two older ones for a fleet without it, in
//!   `events`; the sync check and the repair of differing buckets in
//!   `check`), each sent by `call` with bearer token, deadline and retries;
//! * [`Pusher`]: a background task over a [`FleetClient`] that heartbeats
//!   every second with the worker's load, flushes the reports fed to its
//!   [`PusherHandle`] every 100 ms, and sends a full snapshot from a
//!   [`BlockSource`] every 5 s. It keeps the fleet's view right through
//!   lost reports, fleet outages and lease expiries by scheduling full
//!   resyncs, with bounded memory (its turn in `pusher`, a resync's steps
//!   in `pusher/resync`).
//!
//! An example (run, against a real router, as the router's test
//! `push::the_push_module_example_runs_against_a_router`):
//!
//! ```ignore
//! use protocol::BlockHash;
//! use protocol::family::FamilyBlock;
//! use worker::push::*;
//!
//! // `source`: an `Arc<dyn BlockSource>` over the worker's cache.
//! let client = FleetClient::new(FleetClientConfig::new(
//!     "http://127.0.0.1:8080",
//!     Some("change-me".into()),
//! ))?;
//! let identity = WorkerIdentity {
//!     worker_id: "gpu-0".into(),
//!     model: "Qwen/Qwen3-8B".into(),
//!     url: "http://10.0.0.5:8000".into(),
//!     role: None,
//! };
//! let pusher = Pusher::start(client, PusherConfig::new(identity), source);
//! let handle = pusher.handle();
//! // A block, its prefix family (the hash of its chain's first block) and
//! // the best medium it is held on.
//! let block = FamilyBlock {
//!     hash: BlockHash(0x7219_bff9_b083_37ef),
//!     family: Some(BlockHash(0x0c3e_12aa_9f00_7d21)),
//!     tier: protocol::Tier::Gpu,
//! };
//! handle.stored(&[block]); // from BlockStored
//! handle.evicted(&[block]); // from BlockRemoved
//! pusher.shutdown(true).await?; // and drain the worker
//! ```
//!
//! Metrics (the `metrics` crate): `prefix_router_push_total{op}` (accepted
//! heartbeats, flushes, syncs), `prefix_router_push_failures_total{op}`,
//! `prefix_router_push_resyncs_total{reason}`,
//! `prefix_router_push_syncs_total{reason}` (`periodic` or a resync reason),
//! `prefix_router_push_hashes_total{op}`,
//! `prefix_router_push_sync_checks_total{outcome}` (`unchanged`,
//! `repaired`, `repair_short`, `repair_failed`, `differs`, `failed`),
//! `prefix_router_push_dropped_hashes_total{reason=fault|overflow}` and
//! `prefix_router_push_http_requests_total{op,outcome}` (every attempt).

mod call;
mod check;
mod client;
mod config;
mod error;
mod events;
mod handle;
mod pending;
mod pusher;
mod retry;
mod wire;

pub use client::{FLEET_MAX_BATCH, FleetClient, FleetClientConfig, SyncReport, WorkerIdentity};
pub use config::{BlockSource, PusherConfig};
pub use error::PushError;
pub use events::RETRY_EVENTS_AFTER;
pub use handle::{PusherHandle, PusherStatus};
pub use pending::{Batch, Pending, ResyncReason};
pub use pusher::Pusher;
pub use retry::Backoff;
