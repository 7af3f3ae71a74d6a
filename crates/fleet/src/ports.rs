//! [`free_port`]: a loopback port for a server that must know its port
//! before it starts (Valkey, HAProxy, a router behind a balancer).

use std::net::TcpListener;

use anyhow::{Context, bail};

/// A free TCP port on 127.0.0.1 (bound, then released); never 6379, the
/// port of a system Valkey that tests must not touch.
pub fn free_port() -> anyhow::Result<u16> {
    for _ in 0..16 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port")?
            .port();
        if port != 6379 {
            return Ok(port);
        }
    }
    bail!("no free port other than 6379")
}
