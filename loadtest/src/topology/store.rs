//! [`Store`]: the fleet's Valkey, one server or a 3 + 3 cluster, with the
//! faults the scenarios inject into it and the CPU it used.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

use fleet::{Valkey, ValkeyCluster, ValkeySpec, proc_cpu_seconds};

/// One server, or a cluster with its primaries' ports as they were at the
/// start.
#[derive(Debug)]
pub(super) enum Store {
    Single(Valkey),
    Cluster(ValkeyCluster, Vec<u16>),
}

impl Store {
    /// A cluster (3 primaries, a replica each), or one `program` with its
    /// files in `dir/valkey` (an append-only file with `aof`).
    pub(super) fn start(
        cluster: bool,
        program: &Path,
        dir: &Path,
        aof: bool,
    ) -> anyhow::Result<Store> {
        if cluster {
            let cluster = ValkeyCluster::start(3, 1).context("starting a valkey cluster")?;
            let primaries = cluster.primaries();
            return Ok(Store::Cluster(cluster, primaries));
        }
        let valkey_dir = dir.join("valkey");
        Ok(Store::Single(
            Valkey::start_with(ValkeySpec {
                program: Some(program.to_owned()),
                log: Some(valkey_dir.join("valkey.log")),
                dir: Some(valkey_dir),
                aof,
                ..ValkeySpec::default()
            })
            .context("starting valkey-server")?,
        ))
    }

    /// `--valkey` for the routers: the URL, or the cluster's seeds.
    pub(super) fn url(&self) -> String {
        match self {
            Store::Single(v) => v.url(),
            Store::Cluster(c, _) => c.seeds().to_owned(),
        }
    }

    /// SIGKILLs the server (on a cluster: its first primary).
    pub(super) fn kill(&mut self) {
        match self {
            Store::Single(v) => v.kill(),
            Store::Cluster(c, primaries) => {
                if let Some(&p) = primaries.first()
                    && let Err(e) = c.kill(p)
                {
                    eprintln!("loadtest: killing a cluster primary: {e:#}");
                }
            }
        }
    }

    /// Starts the server again on its port (from its append-only file when
    /// `keep_data`); a cluster is not restarted (its replicas take over).
    pub(super) fn restart(&mut self, keep_data: bool) -> anyhow::Result<()> {
        match self {
            Store::Single(v) => v.restart(keep_data),
            Store::Cluster(..) => bail!("a cluster is not restarted: its replicas take over"),
        }
    }

    /// SIGKILLs the cluster's first primary and waits until its replica
    /// serves its slots; says what happened.
    pub(super) fn fail_over(&self) -> anyhow::Result<String> {
        let Store::Cluster(cluster, primaries) = self else {
            bail!("valkey-failover needs --valkey-cluster");
        };
        let port = *primaries.first().context("no primary")?;
        cluster.kill(port)?;
        let took = cluster.wait_healthy(primaries.len(), Duration::from_secs(30))?;
        Ok(format!(
            "cluster primary :{port} SIGKILLed; its replica served its slots after {:.1} s",
            took.as_secs_f64()
        ))
    }

    /// CPU seconds so far: of every node, and of each primary (empty for
    /// one server).
    pub(super) fn cpu(&self) -> (f64, Vec<f64>) {
        match self {
            Store::Single(v) => (
                v.pid().and_then(proc_cpu_seconds).unwrap_or(0.0),
                Vec::new(),
            ),
            Store::Cluster(c, primaries) => (
                c.ports().iter().map(|&p| node_cpu(c, p)).sum(),
                primaries.iter().map(|&p| node_cpu(c, p)).collect(),
            ),
        }
    }

    /// Stops one server now (a cluster stops when dropped).
    pub(super) fn stop(&mut self) {
        if let Store::Single(v) = self {
            v.kill();
        }
    }
}

/// CPU seconds of cluster node `port` (0 once it is gone).
fn node_cpu(c: &ValkeyCluster, port: u16) -> f64 {
    c.pid(port)
        .ok()
        .and_then(|pid| u32::try_from(pid).ok())
        .and_then(proc_cpu_seconds)
        .unwrap_or(0.0)
}
