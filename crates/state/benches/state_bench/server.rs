//! The valkey-server child process the bench measures: started on a free
//! loopback port without persistence, killed (and reaped) on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A valkey-server child; killed (and reaped) on drop, also on panic.
pub struct ValkeyGuard {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl ValkeyGuard {
    pub fn start() -> Result<Self> {
        let port = free_port()?;
        let dir = tempfile::tempdir().context("tempdir")?;
        let bin = std::env::var("VALKEY_SERVER").unwrap_or_else(|_| "valkey-server".into());
        let child = Command::new(&bin)
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {bin} (run scripts/install-deps.sh)"))?;
        let guard = ValkeyGuard {
            child,
            port,
            _dir: dir,
        };
        guard.wait_ready()?;
        Ok(guard)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&self) -> Result<()> {
        let client = redis::Client::open(self.url())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut c) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("valkey-server on port {} did not start", self.port)
    }
}

impl Drop for ValkeyGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free ephemeral port on 127.0.0.1 (bound, then released); never 6379.
fn free_port() -> Result<u16> {
    for _ in 0..16 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port != 6379 {
            return Ok(port);
        }
    }
    bail!("no free port")
}
