//! Competitor routers ("peers") for the load test, from PyPI, run as R
//! replicas behind the same balancer and pointed at the same sim-workers as
//! our routers. Two modes per project:
//!
//! * plain: `sglang-router` 0.3.2 and `vllm-router`, each with its
//!   `cache_aware` policy (one approximate tree per replica);
//! * best (issue 13: exact, multi-replica cache-aware routing as each
//!   project documents it): `vllm-router-kv` (`--policy kv_aware` fed by
//!   every sim's vLLM KV events), `smg` 1.13.0 (SGLang Model Gateway,
//!   `cache_aware` with its mesh: the replicas share their trees) and
//!   `dynamo` (Dynamo's standalone KV selection service, one per replica,
//!   replica-synced, behind our thin frontend: [`dynamo`]).
//!
//! Files: `install` (venvs), `ready` (readiness), `command` (the plain
//! launcher and its knobs), `modes` (each peer's
//! command line as a fleet [`ExternalRouter`](crate::topology::ExternalRouter)),
//! [`dynamo`] (the frontend of Dynamo's selection service).
//!
//! * [`install`] creates one virtualenv per package under `root`
//!   (`<root>/sglang-router-venv`, `<root>/vllm-router-venv`,
//!   `<root>/smg-venv`, `<root>/ai-dynamo-runtime-venv`) and installs the
//!   pinned version from PyPI; it is idempotent (a venv that already holds
//!   the pinned version is reused untouched). `loadtest/peers/install.sh`
//!   does the same from a shell.
//! * [`command`] builds the documented launcher command of one replica:
//!   `python -m sglang_router.launch_router …` /
//!   `python -m vllm_router.launch_router …` (the `vllm-router` entry point),
//!   with `--policy cache_aware`, everything bound to 127.0.0.1, and a
//!   Prometheus port of its own (neither peer can turn its exporter off, both
//!   default to port 29000, and a second replica on a taken port dies).
//! * [`wait_ready`] / [`wait_ready_workers`] poll the replica's
//!   `GET /readiness`, which both peers answer with
//!   `{"status":"ready","healthy_workers":N,"total_workers":M}`. Do not use
//!   `/health` to wait: `sglang-router` answers it `200 OK` before it has
//!   registered any worker (it registers them in the background), and both
//!   answer `/v1/models` differently.
//!
//! What the peers do with the sim-workers (see `loadtest/peers/README.md`
//! for the full record): both proxy `/v1/completions` and
//! `/v1/chat/completions` (streamed or not) and pass the workers' response
//! headers (`x-sim-worker`, `x-sim-cached-tokens`) through unchanged;
//! `sglang-router` 0.3.2 rejects token-id prompts (`"prompt": [1, 2, …]`)
//! with 422 before routing; `vllm-router` 0.1.17 accepts them.
//!
//! Only `std`, `anyhow` and `tokio` (net, io, time) are used.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::bail;

mod command;
pub mod dynamo;
mod install;
mod modes;
mod ready;

pub use command::{AUX_PORT, ENV, PORT, PeerOptions, WORKER_URLS, command, launcher_args};
pub use install::{PeerInstall, install};
pub use modes::{check_private_network, external_router};
pub use ready::{wait_ready, wait_ready_workers};

/// The address every peer binds (its API and its metrics).
pub const BIND_HOST: &str = "127.0.0.1";

/// The readiness route both peers serve (see the module docs).
pub const READY_PATH: &str = "/readiness";

/// A competitor router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerKind {
    /// `sglang-router` (SGLang Model Gateway), PyPI `sglang-router`.
    SglangRouter,
    /// `vllm-router`, PyPI `vllm-router`: plain `cache_aware`.
    VllmRouter,
    /// `vllm-router` with `--policy kv_aware` on the sims' KV events.
    VllmRouterKv,
    /// SMG (SGLang Model Gateway), PyPI `smg`: `cache_aware` with its mesh.
    Smg,
    /// Dynamo's selection service (PyPI `ai-dynamo-runtime`) behind our
    /// frontend ([`dynamo`]).
    Dynamo,
}

impl PeerKind {
    /// Every peer, in a stable order.
    pub const ALL: [PeerKind; 5] = [
        PeerKind::SglangRouter,
        PeerKind::VllmRouter,
        PeerKind::VllmRouterKv,
        PeerKind::Smg,
        PeerKind::Dynamo,
    ];

    /// Its name: the arm's name in `--policies` (`vllm-router-kv`).
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::SglangRouter => "sglang-router",
            PeerKind::VllmRouter => "vllm-router",
            PeerKind::VllmRouterKv => "vllm-router-kv",
            PeerKind::Smg => "smg",
            PeerKind::Dynamo => "dynamo",
        }
    }

    /// The PyPI package, and the venv's prefix (`vllm-router`).
    pub fn package(self) -> &'static str {
        match self {
            PeerKind::SglangRouter => "sglang-router",
            PeerKind::VllmRouter | PeerKind::VllmRouterKv => "vllm-router",
            PeerKind::Smg => "smg",
            PeerKind::Dynamo => "ai-dynamo-runtime",
        }
    }

    /// The pinned PyPI version [`install`] installs (keep in step with
    /// `loadtest/peers/install.sh`).
    pub fn pinned_version(self) -> &'static str {
        match self {
            PeerKind::SglangRouter => "0.3.2",
            PeerKind::VllmRouter | PeerKind::VllmRouterKv => "0.1.17",
            PeerKind::Smg => "1.13.0",
            PeerKind::Dynamo => "1.6.1",
        }
    }

    /// The Python module run with `python -m` to start one router (for
    /// Dynamo, the selection service beside our frontend).
    pub fn launcher_module(self) -> &'static str {
        match self {
            PeerKind::SglangRouter => "sglang_router.launch_router",
            PeerKind::VllmRouter | PeerKind::VllmRouterKv => "vllm_router.launch_router",
            PeerKind::Smg => "smg.launch_router",
            PeerKind::Dynamo => "dynamo.select_service",
        }
    }

    /// The quiet `--log-level` used unless [`PeerOptions::log_level`] says
    /// otherwise (`sglang-router` logs two lines per request at `info`).
    pub fn default_log_level(self) -> &'static str {
        match self {
            PeerKind::SglangRouter | PeerKind::Smg => "warn",
            PeerKind::VllmRouter | PeerKind::VllmRouterKv | PeerKind::Dynamo => "warning",
        }
    }

    /// The venv of this peer under `root` (`<root>/sglang-router-venv`).
    pub fn venv_dir(self, root: &Path) -> PathBuf {
        root.join(format!("{}-venv", self.package()))
    }
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PeerKind {
    type Err = anyhow::Error;

    /// Accepts `sglang`, `sglang-router`, `vllm`, `vllm-router`,
    /// `vllm-router-kv`, `smg`, `dynamo` (any case, `_` for `-`).
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "sglang" | "sglang-router" => Ok(PeerKind::SglangRouter),
            "vllm" | "vllm-router" => Ok(PeerKind::VllmRouter),
            "vllm-kv" | "vllm-router-kv" => Ok(PeerKind::VllmRouterKv),
            "smg" => Ok(PeerKind::Smg),
            "dynamo" => Ok(PeerKind::Dynamo),
            other => bail!(
                "unknown peer {other:?}: expected sglang-router, vllm-router, vllm-router-kv, \
                 smg or dynamo"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn fake_install(kind: PeerKind) -> PeerInstall {
        PeerInstall {
            kind,
            python: PathBuf::from("/venv/bin/python"),
            version: kind.pinned_version().to_owned(),
        }
    }

    #[test]
    fn parses_names() -> anyhow::Result<()> {
        assert_eq!("sglang".parse::<PeerKind>()?, PeerKind::SglangRouter);
        assert_eq!("SGLang_Router".parse::<PeerKind>()?, PeerKind::SglangRouter);
        assert_eq!("vllm-router".parse::<PeerKind>()?, PeerKind::VllmRouter);
        assert!("nginx".parse::<PeerKind>().is_err());
        for k in PeerKind::ALL {
            assert_eq!(k.to_string().parse::<PeerKind>()?, k);
        }
        Ok(())
    }
}
