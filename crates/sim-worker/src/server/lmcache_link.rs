//! [`LmcacheLink`]: a simulated LMCache instance's connection to a real
//! LMCache controller, over the controller's ZeroMQ protocol as LMCache's
//! own worker speaks it (`lmcache/v1/cache_controller/worker.py`): a
//! `RegisterMsg` on a REQ socket to its reply port, a `HeartbeatMsg` every
//! second on a REQ socket to its heartbeat port, and the chunk admits and
//! evicts as `BatchedKVOperationMsg` on a PUSH socket to its pull port.
//!
//! The engine's driver hands batches over a bounded channel and never
//! waits; a batch the channel has no room for is lost (counted in a log
//! line), as are batches before the controller answers the registration.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::{PushSocket, ReqSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::config::LmcacheSettings;
use crate::lmcache::{CPU_LOCATION, ChunkOp, batch_msg, heartbeat_msg, register_msg};

/// Batches waiting for the socket, at most.
const QUEUE: usize = 1024;
const HEARTBEAT: Duration = Duration::from_secs(1);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection's tasks and the way batches reach them.
pub struct LmcacheLink {
    tx: mpsc::Sender<Vec<ChunkOp>>,
    tasks: Vec<JoinHandle<()>>,
    lost: u64,
}

impl LmcacheLink {
    /// Starts registering `settings.instance_id` (its HTTP port `port`)
    /// with the controller, then heartbeats and batches.
    pub fn start(settings: LmcacheSettings, port: u16) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let beat = tokio::spawn(heartbeats(settings.clone(), port));
        let push = tokio::spawn(pushes(settings, port, rx));
        LmcacheLink {
            tx,
            tasks: vec![beat, push],
            lost: 0,
        }
    }

    /// Queues `ops` for the controller; never waits.
    pub fn send(&mut self, ops: Vec<ChunkOp>) {
        if ops.is_empty() {
            return;
        }
        if self.tx.try_send(ops).is_err() {
            self.lost += 1;
            if self.lost.is_power_of_two() {
                tracing::warn!(
                    lost = self.lost,
                    "LMCache controller link behind: batches lost"
                );
            }
        }
    }
}

impl Drop for LmcacheLink {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One request-reply exchange on a fresh REQ socket (as LMCache's worker
/// does; a REQ socket whose reply never came cannot be reused).
async fn request(endpoint: &str, msg: Vec<u8>) -> Result<(), String> {
    let exchange = async {
        let mut sock = ReqSocket::new();
        sock.connect(endpoint).await.map_err(|e| e.to_string())?;
        sock.send(ZmqMessage::from(msg))
            .await
            .map_err(|e| e.to_string())?;
        sock.recv().await.map_err(|e| e.to_string())?;
        Ok(())
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no reply from {endpoint}"))?
}

async fn heartbeats(s: LmcacheSettings, port: u16) {
    let endpoint = s.endpoint(s.heartbeat_port);
    let mut tick = tokio::time::interval(HEARTBEAT);
    loop {
        tick.tick().await;
        if let Err(e) = request(&endpoint, heartbeat_msg(&s.instance_id, port)).await {
            tracing::debug!(error = %e, "LMCache heartbeat failed");
        }
    }
}

async fn pushes(s: LmcacheSettings, port: u16, mut rx: mpsc::Receiver<Vec<ChunkOp>>) {
    let reply = s.endpoint(s.reply_port);
    let mut attempt = 0u32;
    while let Err(e) = request(&reply, register_msg(&s.instance_id, port)).await {
        attempt += 1;
        if attempt.is_power_of_two() {
            tracing::warn!(error = %e, attempt, "LMCache registration failed; retrying");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let pull = s.endpoint(s.pull_port);
    let mut sock = PushSocket::new();
    while let Err(e) = sock.connect(&pull).await {
        tracing::warn!(error = %e, "connecting to the LMCache controller's pull port; retrying");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tracing::info!(instance = %s.instance_id, "registered with the LMCache controller");
    let mut seq = 0u64;
    while let Some(ops) = rx.recv().await {
        let msg = batch_msg(&s.instance_id, CPU_LOCATION, &ops, seq);
        seq += ops.len() as u64;
        if let Err(e) = sock.send(ZmqMessage::from(msg)).await {
            tracing::warn!(error = %e, "LMCache batch not sent");
        }
    }
}
