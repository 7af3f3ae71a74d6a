//! The `sim-worker` binary, as a real process:
//!
//! * `fleet`: reporting through the push API to a real router on a real
//!   valkey-server (blocks appear, hits come back, evictions follow,
//!   syncs heal dropped eviction reports, silence ends the lease);
//! * `kv`: its vLLM KV-event stream decodes, and replaying it from empty
//!   gives exactly its cached set;
//! * `render`: vLLM's render routes and `/tokenize` return the ids the sim
//!   caches for the same body;
//! * `http`: vLLM's metrics and ORCA header, streaming on the time model's
//!   schedule, aborts on disconnect, pause and crash switches.
//!
//! Nothing asserts on latency: waits poll with generous deadlines, and the
//! timing checks only bound from below what the schedule guarantees.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod support;

#[path = "sim_worker/fleet.rs"]
mod fleet;
#[path = "sim_worker/harness.rs"]
mod harness;
#[path = "sim_worker/http.rs"]
mod http;
#[path = "sim_worker/kv.rs"]
mod kv;
#[path = "sim_worker/render.rs"]
mod render;
