//! A TCP proxy that adds latency: accepts on an ephemeral loopback port,
//! connects each client to the upstream, and copies both ways, holding
//! every chunk for the delay in force when it was read (a delay line: order
//! kept, throughput not capped). The delay can be changed live.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// A running proxy; stops (and cuts its connections) when dropped.
pub struct SlowProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl SlowProxy {
    /// A proxy to `upstream`, without delay until [`SlowProxy::set_delay`].
    pub async fn start(upstream: SocketAddr) -> SlowProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = delay_ms.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let delay = delay.clone();
                conns.spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::join!(pipe(cr, sw, delay.clone()), pipe(sr, cw, delay));
                });
                // Reap finished connections as we go.
                while conns.try_join_next().is_some() {}
            }
        });
        SlowProxy {
            addr,
            delay_ms,
            task,
        }
    }

    /// `redis://<addr>`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Holds every chunk read from now on for `d` before writing it.
    pub fn set_delay(&self, d: Duration) {
        self.delay_ms.store(d.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, each chunk written at (time read + delay).
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Arc<AtomicU64>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = Instant::now() + Duration::from_millis(delay.load(Ordering::SeqCst));
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}
