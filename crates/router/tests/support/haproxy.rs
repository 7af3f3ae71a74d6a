//! HAProxy as the fleet's L4 balancer, a child process on an ephemeral
//! loopback port: TCP mode, round robin over router ports, an HTTP health
//! check (`GET /health`) every 500 ms, and connection retries redispatched
//! to another router. SIGKILLed on drop.
//!
//! `haproxy` comes from `$HAPROXY`, else `$PATH`, else `/usr/sbin/haproxy`
//! (Debian's package; `scripts/install-deps.sh`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// A running HAProxy; killed on drop.
pub struct Haproxy {
    child: Option<Child>,
    /// Its frontend port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
}

/// HAProxy's configuration: a TCP frontend on `listen_port` in front of
/// `router_ports`, its stats socket at `socket`, its connection log
/// (`option tcplog`, one line per connection with its termination state
/// and retries) on stdout.
pub fn config(listen_port: u16, router_ports: &[u16], socket: &Path) -> String {
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
         \x20   timeout client 5m\n\
         \x20   timeout server 5m\n\
         \x20   timeout check 1s\n\
         \x20   retries 3\n\
         \x20   option redispatch 1\n\
         frontend routers_in\n\
         \x20   bind 127.0.0.1:{listen_port}\n\
         \x20   default_backend routers\n\
         backend routers\n\
         \x20   balance roundrobin\n\
         \x20   option httpchk GET /health\n\
         \x20   http-check expect status 200\n\
         \x20   default-server inter 500ms fastinter 250ms downinter 250ms fall 2 rise 1\n",
        socket = socket.display()
    );
    for (i, p) in router_ports.iter().enumerate() {
        c.push_str(&format!("    server r{i} 127.0.0.1:{p} check\n"));
    }
    c
}

fn program() -> String {
    if let Ok(p) = std::env::var("HAPROXY") {
        return p;
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("haproxy").is_file()));
    if on_path {
        "haproxy".into()
    } else {
        "/usr/sbin/haproxy".into()
    }
}

impl Haproxy {
    /// Writes the configuration into `dir` (which must exist and outlive
    /// it), starts `haproxy -db` and waits until its frontend accepts
    /// connections. Its connection log goes to `dir/haproxy.log`.
    pub fn start(dir: &Path, router_ports: &[u16]) -> Haproxy {
        let port = free_port();
        let cfg = dir.join("haproxy.cfg");
        let socket = dir.join("haproxy.sock");
        let _ = std::fs::remove_file(&socket);
        std::fs::write(&cfg, config(port, router_ports, &socket)).expect("write haproxy.cfg");
        let log = std::fs::File::create(dir.join("haproxy.log")).expect("haproxy.log");
        let err = log.try_clone().expect("log");
        let bin = program();
        let child = Command::new(&bin)
            .args(["-db", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} (apt-get install haproxy): {e}"));
        let h = Haproxy {
            child: Some(child),
            port,
            dir: dir.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        h
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its connection log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("haproxy.log")).unwrap_or_default()
    }

    /// One command on the stats socket; its answer.
    pub fn command(&self, cmd: &str) -> String {
        let mut s = UnixStream::connect(self.dir.join("haproxy.sock")).expect("stats socket");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        s.write_all(format!("{cmd}\n").as_bytes()).expect("write");
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
        let col = |name: &str| header.iter().position(|h| *h == name).expect("column");
        let (sv, status, stot) = (col("svname"), col("status"), col("stot"));
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
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
