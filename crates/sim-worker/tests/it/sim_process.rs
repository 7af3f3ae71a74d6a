//! The `sim-worker` binary, as a real process (reporting to a real router
//! is a system test: `crates/system-tests`, `sim_fleet`):
//!
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

pub mod harness;
mod http;
mod kv;
mod render;
