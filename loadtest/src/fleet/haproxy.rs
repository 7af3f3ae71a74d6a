//! HAProxy as the fleet's L4 balancer: TCP mode, round robin over the
//! router replicas, an HTTP health check every 500 ms so that a killed
//! router leaves the rotation within about a second, and a redispatch of
//! connections that cannot reach their router.

use std::path::Path;

use crate::process::{ChildProc, ProcSpec};

/// HAProxy's configuration for a frontend on `listen_port` and routers on
/// `router_ports`, checked with `GET health_path`.
pub fn config(listen_port: u16, router_ports: &[u16], health_path: &str) -> String {
    let mut c = format!(
        "global\n\
         \x20   maxconn 4096\n\
         \x20   nbthread 1\n\
         defaults\n\
         \x20   mode tcp\n\
         \x20   timeout connect 2s\n\
         \x20   timeout client 30m\n\
         \x20   timeout server 30m\n\
         \x20   timeout check 1s\n\
         \x20   retries 3\n\
         \x20   option redispatch\n\
         frontend routers_in\n\
         \x20   bind 127.0.0.1:{listen_port}\n\
         \x20   default_backend routers\n\
         backend routers\n\
         \x20   balance roundrobin\n\
         \x20   option httpchk GET {health_path}\n\
         \x20   default-server inter 500ms fastinter 250ms downinter 250ms fall 2 rise 1\n"
    );
    for (i, p) in router_ports.iter().enumerate() {
        c.push_str(&format!("    server r{i} 127.0.0.1:{p} check\n"));
    }
    c
}

/// Writes the configuration into `dir` and starts `haproxy -db` (in the
/// foreground, so that it is our child) on it.
pub fn start(
    program: &Path,
    dir: &Path,
    listen_port: u16,
    router_ports: &[u16],
    health_path: &str,
) -> anyhow::Result<ChildProc> {
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, config(listen_port, router_ports, health_path))?;
    ProcSpec::new("haproxy", program, dir.join("haproxy.log"))
        .args(["-db".to_owned(), "-f".into(), cfg.display().to_string()])
        .spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_lists_every_router_with_checks() {
        let c = config(7000, &[7001, 7002], "/health");
        assert!(c.contains("bind 127.0.0.1:7000"));
        assert!(c.contains("mode tcp"));
        assert!(c.contains("option httpchk GET /health"));
        assert!(c.contains("server r0 127.0.0.1:7001 check"));
        assert!(c.contains("server r1 127.0.0.1:7002 check"));
        assert!(!c.contains("6379"));
    }
}
