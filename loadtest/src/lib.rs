//! Load tests of a prefix-router fleet.
//!
//! `loadtest run` starts a fleet on 127.0.0.1 ([`fleet`]: Valkey, router
//! replicas behind an L4 balancer, sim-workers), sends a [`workload`]
//! through it ([`drive`]), applies a [`scenario`]'s fault in the middle, and
//! writes a [`report`] comparing routing policies on the same workload.
//! See `docs/loadtest.md`.

#![warn(missing_docs)]

pub mod calibrate;
pub mod cli;
pub mod client;
pub mod drive;
pub mod fleet;
pub mod machine;
pub mod metrics;
pub mod peers;
pub mod report;
pub mod run;
pub mod runner;
pub mod scenario;
pub mod workload;
