//! [`ValkeyCluster`]: a real Valkey Cluster on 127.0.0.1 (3 primaries with
//! a replica each by default), started and stopped by
//! `scripts/valkey-cluster.sh`, the script operators use, so that the tests
//! exercise it too. Stopped on drop.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::binaries::workspace_root;

/// Client and bus ports of node i: base + i and base + 100 + i.
const BUS_OFFSET: u16 = 100;

/// A running cluster; its nodes are shut down on drop.
#[derive(Debug)]
pub struct ValkeyCluster {
    dir: tempfile::TempDir,
    ports: Vec<u16>,
    seeds: String,
}

impl ValkeyCluster {
    /// `primaries` primaries with `replicas` replicas each, on free ports;
    /// returns once every node sees the cluster `ok` and every replica has
    /// synced with its primary.
    pub fn start(primaries: usize, replicas: usize) -> anyhow::Result<ValkeyCluster> {
        let nodes = primaries * (replicas + 1);
        let base = free_base(nodes)?;
        let dir = tempfile::tempdir().context("a directory for the cluster")?;
        let out = script()
            .arg("start")
            .arg("--dir")
            .arg(dir.path())
            .args(["--base-port", &base.to_string()])
            .args(["--primaries", &primaries.to_string()])
            .args(["--replicas", &replicas.to_string()])
            .output()
            .context("running scripts/valkey-cluster.sh")?;
        if !out.status.success() {
            bail!(
                "scripts/valkey-cluster.sh start failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let seeds = stdout.lines().last().unwrap_or_default().to_owned();
        let ports = (0..nodes as u16).map(|i| base + i).collect();
        Ok(ValkeyCluster { dir, ports, seeds })
    }

    /// The seed URLs, comma-separated (`--valkey`'s cluster form).
    pub fn seeds(&self) -> &str {
        &self.seeds
    }

    /// Every node's client port.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The nodes' files (nodes.conf, logs, pid files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `ROLE`'s first line of node `port` (`master` or `slave`), or `None`
    /// when it does not answer.
    pub fn role(&self, port: u16) -> Option<String> {
        let out = cli(port, &["ROLE"]).ok()?;
        out.lines().next().map(str::to_owned)
    }

    /// The client ports of the nodes that answer as primaries.
    pub fn primaries(&self) -> Vec<u16> {
        self.ports
            .iter()
            .copied()
            .filter(|&p| self.role(p).as_deref() == Some("master"))
            .collect()
    }

    /// The process id of node `port`, from its pid file.
    pub fn pid(&self, port: u16) -> anyhow::Result<i32> {
        let pidfile = self.dir.path().join(format!("node-{port}/valkey.pid"));
        std::fs::read_to_string(&pidfile)
            .with_context(|| format!("reading {}", pidfile.display()))?
            .trim()
            .parse()
            .context("a pid")
    }

    /// SIGKILLs node `port`, like a crash.
    pub fn kill(&self, port: u16) -> anyhow::Result<()> {
        let pid = self.pid(port)?;
        // SAFETY: kill(2) with a pid read from the node's own pid file.
        if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
            bail!("kill {pid}: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits until every answering node reports `cluster_state:ok` and
    /// `want` of them are primaries (after a failover: the promoted
    /// replicas); returns how long that took.
    pub fn wait_healthy(&self, want: usize, timeout: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            let up: Vec<u16> = self
                .ports
                .iter()
                .copied()
                .filter(|&p| self.role(p).is_some())
                .collect();
            let ok = up.iter().all(|&p| {
                cli(p, &["CLUSTER", "INFO"]).is_ok_and(|i| i.contains("cluster_state:ok"))
            });
            if ok && self.primaries().len() == want {
                return Ok(start.elapsed());
            }
            if start.elapsed() > timeout {
                bail!("the cluster did not become healthy with {want} primaries in {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ValkeyCluster {
    fn drop(&mut self) {
        let _ = script()
            .arg("stop")
            .arg("--dir")
            .arg(self.dir.path())
            .output();
    }
}

fn script() -> Command {
    Command::new(workspace_root().join("scripts/valkey-cluster.sh"))
}

/// `valkey-cli -p port args...` (`$VALKEY_CLI`, else `valkey-cli`).
pub fn cli(port: u16, args: &[&str]) -> anyhow::Result<String> {
    let program: PathBuf =
        std::env::var_os("VALKEY_CLI").map_or_else(|| PathBuf::from("valkey-cli"), PathBuf::from);
    let out = Command::new(&program)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if text.starts_with("Could not connect") || text.starts_with("ERR") {
        bail!("{text}");
    }
    Ok(text)
}

/// A base port b with b..b+n and b+100..b+100+n free on loopback.
fn free_base(n: usize) -> anyhow::Result<u16> {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
    for attempt in 0..200u32 {
        // Spread over 20000..40000, away from the ephemeral range; every
        // call of a process starts elsewhere.
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let seed = std::process::id()
            .wrapping_add(call.wrapping_mul(1_000_003))
            .wrapping_mul(2_654_435_761)
            .wrapping_add(attempt * 7919);
        let base = 20_000 + (seed % 20_000) as u16;
        let all = (0..n as u16).all(|i| free(base + i) && free(base + BUS_OFFSET + i));
        if all {
            return Ok(base);
        }
    }
    bail!("no free range of ports for a cluster of {n} nodes")
}
