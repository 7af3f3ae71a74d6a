//! The simulator's tests: its model (`sim_worker`'s cache, engine and
//! tiers), its server in-process over real HTTP and ZeroMQ, and the
//! `sim-worker` binary as a process (`sim_process`). One test binary, one
//! module per concern; run one with `cargo test -p sim-worker --test it
//! <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod common;

mod sim_cache;
mod sim_disagg;
mod sim_engine;
mod sim_greedy;
mod sim_lmcache;
mod sim_process;
mod sim_props;
mod sim_tiers;
