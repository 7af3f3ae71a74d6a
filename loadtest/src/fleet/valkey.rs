//! The fleet's private `valkey-server`: loopback, an ephemeral port, no RDB
//! snapshots; optionally an append-only file so that a restart can reload
//! the state (the `valkey-restart` scenario).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::process::{ChildProc, ProcSpec, free_port};

/// A running valkey-server.
#[derive(Debug)]
pub struct Valkey {
    proc: ChildProc,
    port: u16,
    dir: PathBuf,
    aof: bool,
}

impl Valkey {
    /// Starts `program` on a free port with its data in `dir` (created);
    /// `aof` turns on the append-only file (fsync every second).
    pub async fn start(program: &Path, dir: &Path, aof: bool) -> anyhow::Result<Valkey> {
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let spec = ProcSpec::new("valkey", program, dir.join("valkey.log")).args([
            "--port".to_owned(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.display().to_string(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            if aof { "yes" } else { "no" }.into(),
            "--appendfsync".into(),
            "everysec".into(),
        ]);
        let mut v = Valkey {
            proc: spec.spawn()?,
            port,
            dir: dir.to_owned(),
            aof,
        };
        v.wait_ready().await?;
        Ok(v)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process, for CPU accounting.
    pub fn proc(&self) -> &ChildProc {
        &self.proc
    }

    /// SIGKILL, like a crash.
    pub async fn kill(&mut self) {
        self.proc.kill().await;
    }

    /// Starts again on the same port; with `keep_data` false the data
    /// directory's files are removed first, so it comes back empty.
    pub async fn restart(&mut self, keep_data: bool) -> anyhow::Result<()> {
        self.proc.kill().await;
        if !keep_data {
            for entry in std::fs::read_dir(&self.dir)?.flatten() {
                let p = entry.path();
                if p.extension().is_some_and(|e| e == "log") {
                    continue;
                }
                if p.is_dir() {
                    std::fs::remove_dir_all(&p)?;
                } else {
                    std::fs::remove_file(&p)?;
                }
            }
        } else if !self.aof {
            bail!("restarting Valkey with its data needs the append-only file (--valkey-aof)");
        }
        self.proc.respawn().await?;
        self.wait_ready().await
    }

    /// Waits until it answers PING (and has loaded its AOF).
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if ping(self.port).await {
                return Ok(());
            }
            if let Some(status) = self.proc.exited() {
                bail!(
                    "valkey-server exited ({status}); see {}",
                    self.proc.log().display()
                );
            }
            if Instant::now() > deadline {
                bail!("valkey-server on port {} did not answer PING", self.port);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One RESP `PING`; true on `+PONG` (not while loading).
async fn ping(port: u16) -> bool {
    let Ok(Ok(mut s)) = tokio::time::timeout(
        Duration::from_millis(500),
        TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    else {
        return false;
    };
    if s.write_all(b"*1\r\n$4\r\nPING\r\n").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await {
        Ok(Ok(n)) => buf[..n].starts_with(b"+PONG"),
        _ => false,
    }
}
