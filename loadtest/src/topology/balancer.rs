//! The L4 balancer in front of the router replicas, abstracted so that a
//! test can run without HAProxy: [`BalancerKind`] chooses, [`Balancer`] runs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::bail;

use super::tcp_proxy::TcpBalancer;
use fleet::{Haproxy, proc_cpu_seconds};

/// Which balancer a fleet uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BalancerKind {
    /// HAProxy in TCP mode with health checks (the realistic one).
    Haproxy(PathBuf),
    /// The in-process TCP balancer (no health checks; skips refusing routers).
    Builtin,
}

/// What `--balancer` names before the HAProxy binary is located.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalancerChoice {
    /// HAProxy.
    Haproxy,
    /// The builtin TCP balancer.
    Builtin,
}

impl FromStr for BalancerChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "haproxy" => Ok(BalancerChoice::Haproxy),
            "builtin" => Ok(BalancerChoice::Builtin),
            _ => Err(format!(
                "unknown balancer {s:?}: expected haproxy or builtin"
            )),
        }
    }
}

/// A running balancer.
#[derive(Debug)]
pub enum Balancer {
    /// An HAProxy child process.
    Haproxy(Haproxy),
    /// The in-process balancer.
    Builtin(TcpBalancer),
}

impl Balancer {
    /// Starts `kind` in front of `router_ports`; HAProxy's files go in `dir`.
    pub async fn start(
        kind: &BalancerKind,
        dir: &Path,
        router_ports: &[u16],
        health_path: &str,
    ) -> anyhow::Result<Balancer> {
        if router_ports.is_empty() {
            bail!("a balancer needs at least one router");
        }
        Ok(match kind {
            BalancerKind::Haproxy(program) => {
                Balancer::Haproxy(Haproxy::start(program, dir, router_ports, health_path)?)
            }
            BalancerKind::Builtin => {
                let addrs = router_ports
                    .iter()
                    .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                    .collect();
                Balancer::Builtin(TcpBalancer::start(0, addrs).await?)
            }
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        let port = match self {
            Balancer::Haproxy(h) => h.port(),
            Balancer::Builtin(b) => b.addr().port(),
        };
        format!("http://127.0.0.1:{port}")
    }

    /// Stops a separate balancer process (the builtin one stops with the
    /// load test).
    pub fn kill(&mut self) {
        if let Balancer::Haproxy(h) = self {
            h.kill();
        }
    }

    /// CPU seconds used by a separate balancer process (0 for the builtin one,
    /// whose CPU is the load test's).
    pub fn cpu_seconds(&self) -> f64 {
        match self {
            Balancer::Haproxy(h) => h.pid().and_then(proc_cpu_seconds).unwrap_or(0.0),
            Balancer::Builtin(_) => 0.0,
        }
    }
}
