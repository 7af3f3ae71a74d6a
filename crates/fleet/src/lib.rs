//! `fleet`: the one launcher of whole fleets as processes on 127.0.0.1,
//! for the integration tests, the benchmarks and `loadtest` (not
//! published). It runs the workspace's binaries and never links them: it
//! depends on no other crate of the workspace.
//!
//! Layout:
//!
//! * `ports`: [`free_port`], a loopback port known before a server starts.
//! * [`binaries`]: where `prefix-router`, `sim-worker`, `valkey-server` and
//!   `haproxy` are (the workspace's target directory, built when missing
//!   for the load test; beside a test's own executable for tests).
//! * [`process`]: a restartable recipe ([`ProcSpec`]) of any program (a
//!   server, a command-line tool run to completion, a third-party peer)
//!   and a kill-on-drop child ([`ChildProc`]) with its log, output lines
//!   and CPU time (read by `proc_stat` from `/proc`).
//! * `valkey`: [`Valkey`], a private `valkey-server`.
//! * [`router`]: [`RouterSpec`] (`prefix-router serve`) and
//!   [`ReporterSpec`] (`prefix-router reporter`), their flags in one place.
//! * [`sim`]: [`SimSpec`], the flags of a `sim-worker`, and [`Sim`], one
//!   running with the addresses it printed.
//! * [`valkey_cluster`]: [`ValkeyCluster`], a real Valkey Cluster (3
//!   primaries + 3 replicas) through `scripts/valkey-cluster.sh`.
//! * [`haproxy`]: [`Haproxy`], the L4 balancer, and its one [`config`]
//!   writer.
//! * [`lmcache`]: [`LmcacheController`], a real LMCache controller from
//!   the venv of `scripts/lmcache-test.sh`.
//! * [`kustomize`]: a kustomization rendered by the real `kubectl
//!   kustomize`, for the deployment tests.
//!
//! Within: `valkey` and `haproxy` use `ports` and `binaries`;
//! `valkey_cluster` and `kustomize` use `binaries`; `router` and `sim` use `process`;
//! `lmcache` uses `ports`, `binaries` and `process`; `process` uses only
//! `proc_stat`.
//!
//! [`config`]: haproxy::config

// The one crate that starts processes: clippy.toml disallows
// `Command::new` everywhere else.
#![allow(clippy::disallowed_methods)]

pub mod binaries;
pub mod haproxy;
pub mod kustomize;
pub mod lmcache;
mod ports;
mod proc_stat;
pub mod process;
pub mod router;
pub mod sim;
mod valkey;
pub mod valkey_cluster;

pub use haproxy::Haproxy;
pub use lmcache::LmcacheController;
pub use ports::free_port;
pub use process::{ChildProc, ProcSpec, proc_cpu_seconds, wait_http_ok};
pub use router::{ReporterSpec, RouterSpec};
pub use sim::{KvEndpoints, Sim, SimSpec};
pub use valkey::{Valkey, ValkeySpec};
pub use valkey_cluster::ValkeyCluster;
