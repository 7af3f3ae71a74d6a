//! System tests: whole fleets of processes (routers, sims, reporters,
//! HAProxy, Valkey), the fault scenarios, `scripts/fleet.sh`, and the
//! deployment files and dashboards checked against what the binaries do.
//! They run the workspace's binaries from the target directory
//! (`cargo test --workspace` builds them; alone, `cargo build --bins`
//! first). One test binary, one module per concern; run one with
//! `cargo test -p system-tests --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

// The router suite's support (Valkey, routers in-process and as
// processes, fake workers) and the simulator's process harness, shared by
// path: one definition of each.
#[path = "../../../sim-worker/tests/it/sim_process/harness.rs"]
mod harness;
#[path = "../../../router/tests/it/support/mod.rs"]
mod support;

mod dashboards;
mod deploy;
mod deploy_kubernetes;
mod faults;
mod fleet_e2e;
mod fleet_script;
mod reporter_e2e;
mod sim_fleet;
mod tier_e2e;

// The fault scenarios name their helpers from the crate root.
use faults::{fleet, load, slow_proxy};
