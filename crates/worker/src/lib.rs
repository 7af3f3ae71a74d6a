//! The worker side of the fleet: how a vLLM engine (real, beside the
//! reporter, or simulated) tells the routers what its prefix cache holds.
//!
//! Layout (depends on `protocol`; never on the router or the store):
//!
//! * [`push`]: the client of the fleet's `/internal/*` API ([`FleetClient`])
//!   and the background [`Pusher`] that heartbeats, batches reports and
//!   sends periodic snapshots.
//! * [`kv_events`]: vLLM's ZMQ KV-event sockets: publisher (simulated
//!   engines), subscriber and replay client (the reporter).
//! * `metrics_client`: [`MetricsClient`], a bounded `GET /metrics` reader,
//!   shared with the routers' load scraper.
//! * [`reporter`]: `prefix-router reporter`, the sidecar beside a stock
//!   vLLM: KV events in, push reports out (each block on its best tier).
//!
//! Within: `reporter` → `push`, `kv_events`, `metrics_client`.

pub mod kv_events;
mod metrics_client;
pub mod push;
pub mod reporter;

pub use metrics_client::{MetricsClient, ScrapeError};
pub use push::{FleetClient, Pusher};
