//! A minimal in-process L4 balancer: round robin over backends, each
//! accepted connection spliced to one backend; a backend that refuses a
//! connection is skipped for a moment. Used by tests and where HAProxy is
//! not installed (`--balancer builtin`); it shares the load test's CPU.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// How long a backend that refused a connection is skipped.
const DOWN_FOR: Duration = Duration::from_millis(500);

/// A running balancer; stops when dropped.
#[derive(Debug)]
pub struct TcpBalancer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

struct Backends {
    addrs: Vec<SocketAddr>,
    down_until: Mutex<Vec<Option<Instant>>>,
    next: AtomicUsize,
}

impl TcpBalancer {
    /// Listens on `127.0.0.1:listen_port` (0: any) in front of `backends`.
    pub async fn start(listen_port: u16, backends: Vec<SocketAddr>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", listen_port))
            .await
            .context("binding the builtin balancer")?;
        let addr = listener.local_addr()?;
        let n = backends.len();
        let backends = Arc::new(Backends {
            addrs: backends,
            down_until: Mutex::new(vec![None; n]),
            next: AtomicUsize::new(0),
        });
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let b = backends.clone();
                tokio::spawn(async move {
                    let _ = client.set_nodelay(true);
                    if let Some(upstream) = b.connect().await {
                        let _ = upstream.set_nodelay(true);
                        let (mut c, mut u) = (client, upstream);
                        let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
                    }
                });
            }
        });
        Ok(TcpBalancer { addr, task })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Backends {
    /// The next backend in turn that accepts a connection, skipping the
    /// ones recently down (all are tried before giving up).
    async fn connect(&self) -> Option<TcpStream> {
        let n = self.addrs.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for pass in 0..2 {
            for k in 0..n {
                let i = (start + k) % n;
                let skip = self.down_until.lock().await[i].is_some_and(|t| t > Instant::now());
                if skip && pass == 0 {
                    continue;
                }
                let connect = TcpStream::connect(self.addrs[i]);
                match tokio::time::timeout(Duration::from_secs(2), connect).await {
                    Ok(Ok(s)) => {
                        self.down_until.lock().await[i] = None;
                        return Some(s);
                    }
                    _ => self.down_until.lock().await[i] = Some(Instant::now() + DOWN_FOR),
                }
            }
        }
        None
    }
}

impl Drop for TcpBalancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn splices_and_skips_dead_backends() {
        let live = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_addr = live.local_addr().unwrap();
        let dead_addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        tokio::spawn(async move {
            while let Ok((mut s, _)) = live.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 4];
                    if s.read_exact(&mut b).await.is_ok() {
                        let _ = s.write_all(&b).await;
                    }
                });
            }
        });
        let lb = TcpBalancer::start(0, vec![dead_addr, live_addr])
            .await
            .unwrap();
        for _ in 0..4 {
            let mut c = TcpStream::connect(lb.addr()).await.unwrap();
            c.write_all(b"ping").await.unwrap();
            let mut b = [0u8; 4];
            c.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"ping");
        }
    }
}
