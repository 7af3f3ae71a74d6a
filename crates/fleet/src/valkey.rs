//! [`Valkey`]: a private `valkey-server` on 127.0.0.1, an ephemeral port
//! (never 6379), its data in a directory of its own; SIGKILLed on drop. The
//! one launcher of the tests, the benchmarks and the load test.
//!
//! `valkey-server` comes from `$VALKEY_SERVER`, else `$PATH`
//! (`scripts/install-deps.sh` installs it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::ports::free_port;

/// How to start a Valkey.
#[derive(Debug, Clone, Default)]
pub struct ValkeySpec {
    /// The program; `$VALKEY_SERVER`, else `valkey-server`, when `None`.
    pub program: Option<PathBuf>,
    /// The port; a free one when `None`.
    pub port: Option<u16>,
    /// The data directory (created); a temporary one when `None`.
    pub dir: Option<PathBuf>,
    /// The append-only file, fsynced every second (so that a restart with
    /// its data reloads the state); off by default, as RDB snapshots are.
    pub aof: bool,
    /// More `valkey-server` arguments (`--requirepass x`, TLS, ...).
    pub args: Vec<String>,
    /// Where its output goes; discarded when `None`.
    pub log: Option<PathBuf>,
}

/// Where the data lives: a directory of the caller's, or a temporary one
/// removed with the server.
#[derive(Debug)]
enum DataDir {
    Given(PathBuf),
    Temp(tempfile::TempDir),
}

impl DataDir {
    fn path(&self) -> &Path {
        match self {
            DataDir::Given(p) => p,
            DataDir::Temp(t) => t.path(),
        }
    }
}

/// A running valkey-server; killed on drop.
#[derive(Debug)]
pub struct Valkey {
    child: Option<Child>,
    port: u16,
    dir: DataDir,
    spec: ValkeySpec,
}

impl Valkey {
    /// A server without persistence on a free port.
    pub fn start() -> anyhow::Result<Valkey> {
        Self::start_with(ValkeySpec::default())
    }

    /// A server as `spec` says; returns once it answers PING. When the port
    /// is ours to choose, a server that exits at once (another process took
    /// the port between our probe and its bind) is tried again on another.
    pub fn start_with(spec: ValkeySpec) -> anyhow::Result<Valkey> {
        if spec.port.is_some() {
            return Self::start_on_port(spec);
        }
        let mut last = None;
        for _ in 0..5 {
            let spec = ValkeySpec {
                port: Some(free_port()?),
                ..spec.clone()
            };
            match Self::start_on_port(spec) {
                Ok(v) => return Ok(v),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("valkey-server did not start")))
    }

    fn start_on_port(spec: ValkeySpec) -> anyhow::Result<Valkey> {
        let port = match spec.port {
            Some(p) => p,
            None => free_port()?,
        };
        let dir = match &spec.dir {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                DataDir::Given(d.clone())
            }
            None => DataDir::Temp(tempfile::tempdir().context("a data directory")?),
        };
        let mut v = Valkey {
            child: None,
            port,
            dir,
            spec,
        };
        v.spawn()?;
        Ok(v)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let program = self.spec.program.clone().unwrap_or_else(|| {
            std::env::var_os("VALKEY_SERVER")
                .map_or_else(|| PathBuf::from("valkey-server"), PathBuf::from)
        });
        let output = || -> anyhow::Result<Stdio> {
            Ok(match &self.spec.log {
                Some(path) => Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .with_context(|| format!("opening {}", path.display()))?,
                ),
                // Kept beside the data, so that a server that fails to
                // start can say why.
                None => Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(self.dir.path().join("valkey.log"))
                        .context("opening valkey.log")?,
                ),
            })
        };
        let child = Command::new(&program)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", ""])
            .arg("--appendonly")
            .arg(if self.spec.aof { "yes" } else { "no" })
            .args(["--appendfsync", "everysec", "--dir"])
            .arg(self.dir.path())
            .args(&self.spec.args)
            .stdin(Stdio::null())
            .stdout(output()?)
            .stderr(output()?)
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (run scripts/install-deps.sh)",
                    program.display()
                )
            })?;
        self.child = Some(child);
        self.wait_ready()
    }

    /// Waits until it answers PING (also after loading its AOF); a server
    /// that asks for a password counts as up.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match ping(self.port) {
                Some(reply) if reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH") => {
                    return Ok(());
                }
                _ => {}
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = self
                    .spec
                    .log
                    .clone()
                    .unwrap_or_else(|| self.dir.path().join("valkey.log"));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(3).collect();
                bail!(
                    "valkey-server on port {} exited: {status}: {}",
                    self.port,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                );
            }
            if Instant::now() > deadline {
                bail!("valkey-server on port {} did not answer PING", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id (for CPU accounting or signals), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its data directory (the AOF lives there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILL, like a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again on the same port and directory; with `keep_data` false
    /// the directory's data files are removed first (logs kept), so that it
    /// comes back empty.
    pub fn restart(&mut self, keep_data: bool) -> anyhow::Result<()> {
        self.kill();
        if !keep_data {
            for entry in std::fs::read_dir(self.dir.path())?.flatten() {
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
        }
        self.spawn()
    }
}

impl Drop for Valkey {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One RESP `PING` on `port`; the first bytes of the reply.
fn ping(port: u16) -> Option<Vec<u8>> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"*1\r\n$4\r\nPING\r\n").ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    Some(buf[..n].to_vec())
}
