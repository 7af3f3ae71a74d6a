//! [`Haproxy`]: the fleet's L4 balancer, a child process on an ephemeral
//! loopback port: TCP mode, round robin over the routers, an HTTP health
//! check every 500 ms (a killed router leaves the rotation within about a
//! second), connection retries redispatched to another router, a stats
//! socket and a connection log. SIGKILLed on drop. One [`config`] writer
//! for the tests and the load test.
//!
//! `haproxy` comes from `$HAPROXY`, else `$PATH` or the sbin directories
//! (Debian puts it in `/usr/sbin`; `scripts/install-deps.sh`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::binaries::which;
use crate::ports::free_port;

/// HAProxy's configuration: a TCP frontend on `listen_port` in front of
/// `router_ports`, checked with `GET health_path`, its stats socket at
/// `socket`, its connection log (`option tcplog`: one line per connection
/// with its termination state and retries) on stdout.
pub fn config(listen_port: u16, router_ports: &[u16], health_path: &str, socket: &Path) -> String {
    let mut c = format!(
        "global\n\
         \x20   maxconn 4096\n\
         \x20   nbthread 1\n\
         \x20   stats socket {socket} mode 600 level admin\n\
         \x20   log stdout format raw local0 info\n\
         defaults\n\
         \x20   mode tcp\n\
         \x20   log global\n\
         \x20   option tcplog\n\
         \x20   timeout connect 1s\n\
         \x20   timeout client 30m\n\
         \x20   timeout server 30m\n\
         \x20   timeout check 1s\n\
         \x20   retries 3\n\
         \x20   option redispatch 1\n\
         frontend routers_in\n\
         \x20   bind 127.0.0.1:{listen_port}\n\
         \x20   default_backend routers\n\
         backend routers\n\
         \x20   balance roundrobin\n\
         \x20   option httpchk GET {health_path}\n\
         \x20   http-check expect status 200\n\
         \x20   default-server inter 500ms fastinter 250ms downinter 250ms fall 2 rise 1\n",
        socket = socket.display()
    );
    for (i, p) in router_ports.iter().enumerate() {
        c.push_str(&format!("    server r{i} 127.0.0.1:{p} check\n"));
    }
    c
}

/// The `haproxy` program.
pub fn program() -> anyhow::Result<PathBuf> {
    match std::env::var_os("HAPROXY") {
        Some(p) => Ok(PathBuf::from(p)),
        None => which("haproxy")
            .context("haproxy not found on PATH or in /usr/sbin (run scripts/install-deps.sh)"),
    }
}

/// A running HAProxy; killed on drop.
#[derive(Debug)]
pub struct Haproxy {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    socket: PathBuf,
}

/// The longest stats socket path HAProxy accepts (a `sun_path` less its
/// own margin).
const MAX_SOCKET_PATH: usize = 97;

impl Haproxy {
    /// Writes the configuration into `dir` (which must exist and outlive
    /// it), starts `program -db` (see [`program`]) (in the foreground, so that it is our
    /// child) and waits until its frontend accepts connections. Its
    /// connection log goes to `dir/haproxy.log`.
    pub fn start(
        program: &Path,
        dir: &Path,
        router_ports: &[u16],
        health_path: &str,
    ) -> anyhow::Result<Haproxy> {
        let port = free_port()?;
        // HAProxy reads a stats socket path without a leading '/' as an
        // address: the files go in `dir` made absolute.
        let dir =
            &std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display()))?;
        let cfg = dir.join("haproxy.cfg");
        let mut socket = dir.join("haproxy.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            socket = std::env::temp_dir().join(format!("haproxy-{port}.sock"));
        }
        let _ = std::fs::remove_file(&socket);
        std::fs::write(&cfg, config(port, router_ports, health_path, &socket))
            .with_context(|| format!("writing {}", cfg.display()))?;
        let log = std::fs::File::create(dir.join("haproxy.log")).context("haproxy.log")?;
        let err = log.try_clone().context("haproxy.log")?;
        let child = Command::new(program)
            .args(["-db", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let mut h = Haproxy {
            child: Some(child),
            port,
            dir: dir.to_owned(),
            socket,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = h.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!(
                    "haproxy exited ({status}); see {}",
                    h.dir.join("haproxy.log").display()
                );
            }
            if Instant::now() > deadline {
                bail!("haproxy did not listen on {port} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(h)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its frontend port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its connection log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default()
    }

    /// One command on the stats socket; its answer (empty if the socket
    /// cannot be reached).
    pub fn command(&self, cmd: &str) -> String {
        let Ok(mut s) = UnixStream::connect(&self.socket) else {
            return String::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        if s.write_all(format!("{cmd}\n").as_bytes()).is_err() {
            return String::new();
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// Per router server (`r0`, `r1`, …): its status (`UP`, `DOWN`, …)
    /// and its total sessions, from `show stat`.
    pub fn servers(&self) -> Vec<(String, String, u64)> {
        let csv = self.command("show stat");
        let mut lines = csv.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let col = |name: &str| header.iter().position(|h| *h == name);
        let (Some(sv), Some(status), Some(stot)) = (col("svname"), col("status"), col("stot"))
        else {
            return Vec::new();
        };
        lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| f.len() > stot && f[sv].starts_with('r') && f[0] == "routers")
            .map(|f| {
                (
                    f[sv].to_owned(),
                    f[status].to_owned(),
                    f[stot].parse().unwrap_or(0),
                )
            })
            .collect()
    }

    /// The status of server `r<i>`.
    pub fn status(&self, i: usize) -> String {
        let name = format!("r{i}");
        self.servers()
            .into_iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, s, _)| s)
            .unwrap_or_default()
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        self.kill();
        if !self.socket.starts_with(&self.dir) {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_lists_every_router_with_checks() {
        let c = config(7000, &[7001, 7002], "/health", Path::new("/tmp/s.sock"));
        assert!(c.contains("bind 127.0.0.1:7000"));
        assert!(c.contains("mode tcp"));
        assert!(c.contains("option httpchk GET /health"));
        assert!(c.contains("server r0 127.0.0.1:7001 check"));
        assert!(c.contains("server r1 127.0.0.1:7002 check"));
        assert!(c.contains("stats socket /tmp/s.sock"));
        assert!(!c.contains("6379"));
    }
}
