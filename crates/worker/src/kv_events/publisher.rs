//! [`KvEventPublisher`]: vLLM's `ZmqEventPublisher`, for simulated engines.
//!
//! Like vLLM 0.33 it has a PUB socket that sends `[topic, seq, payload]` with
//! `seq` counting batches from 0, a ROUTER socket that replays buffered
//! batches (`seq >= start`) followed by the end marker, and a bounded ring
//! buffer of the most recent `buffer_steps` batches.
//!
//! Unlike vLLM, [`KvEventPublisher::publish`] never blocks: batches go through
//! a bounded queue to a background task, and a full queue drops the batch
//! (counted, and reported to the caller) instead of stalling the simulated
//! engine. Sequence numbers are assigned by the background task, so only sent
//! batches get one and the subscriber sees no gap for a dropped batch — just
//! as vLLM numbers only the batches it sends. Replays run on their own task,
//! so a slow replay client cannot hold up publishing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqError, ZmqMessage};

use super::endpoint::{SocketMode, attach};
use protocol::kv_events::KvEventBatch;
use protocol::kv_events::{EncodeError, encode_batch};
use protocol::kv_events::{PubMessage, ReplayRequest, replay_batch_frames, replay_end_frames};

/// How to set up a [`KvEventPublisher`].
#[derive(Debug, Clone)]
pub struct KvEventPublisherConfig {
    /// The PUB endpoint, e.g. `tcp://127.0.0.1:0` (port 0 picks a free port;
    /// read the real one from [`KvEventPublisher::endpoint`]).
    pub endpoint: String,
    /// Bind (the default, vLLM's `tcp://*:5557`) or connect the PUB socket.
    /// Connecting waits (up to 30 s) for the peer to accept, and zeromq-rs
    /// does not reconnect a connecting PUB socket on its own.
    pub mode: SocketMode,
    /// The replay ROUTER endpoint (always bound); `None` disables replay.
    pub replay_endpoint: Option<String>,
    /// Topic frame of every message (vLLM's default is `""`).
    pub topic: String,
    /// Batches kept for replay (vLLM's default: 10 000).
    pub buffer_steps: usize,
    /// Batches that may wait to be sent before `publish` starts dropping.
    pub queue_capacity: usize,
    /// Filled into batches whose `data_parallel_rank` is `None`, as vLLM's
    /// `publish()` does.
    pub data_parallel_rank: i64,
    /// How long one replay reply may wait for a slow client before the replay
    /// is abandoned.
    pub replay_send_timeout: Duration,
}

impl Default for KvEventPublisherConfig {
    /// Loopback, ephemeral ports, vLLM's buffer size, replay enabled.
    fn default() -> Self {
        Self {
            endpoint: "tcp://127.0.0.1:0".into(),
            mode: SocketMode::Bind,
            replay_endpoint: Some("tcp://127.0.0.1:0".into()),
            topic: String::new(),
            buffer_steps: 10_000,
            queue_capacity: 10_000,
            data_parallel_rank: 0,
            replay_send_timeout: Duration::from_secs(5),
        }
    }
}

/// A socket that could not be set up.
#[derive(Debug, Error)]
pub enum PublisherError {
    /// The PUB socket could not bind or connect.
    #[error("KV-event PUB socket on {endpoint}: {source}")]
    Pub {
        /// The configured endpoint.
        endpoint: String,
        /// The ZeroMQ error.
        #[source]
        source: ZmqError,
    },
    /// The replay ROUTER socket could not bind.
    #[error("KV-event replay ROUTER socket on {endpoint}: {source}")]
    Replay {
        /// The configured endpoint.
        endpoint: String,
        /// The ZeroMQ error.
        #[source]
        source: ZmqError,
    },
}

/// A batch that was not queued.
#[derive(Debug, Error)]
pub enum PublishError {
    /// The queue to the sending task is full; the batch was dropped.
    #[error("KV-event publish queue is full ({capacity} batches); batch dropped")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
    /// The publisher's sending task has stopped.
    #[error("KV-event publisher is shut down")]
    Closed,
    /// The batch cannot be encoded.
    #[error("encoding KV-event batch: {0}")]
    Encode(#[from] EncodeError),
}

/// A queued batch; `send: false` numbers and buffers it without sending.
struct Outgoing {
    payload: Bytes,
    send: bool,
}

/// The most recent batches, for replay.
type ReplayBuffer = Arc<Mutex<VecDeque<(u64, Bytes)>>>;

/// Publishes KV-event batches the way a vLLM engine does; see the module docs.
pub struct KvEventPublisher {
    queue: Option<mpsc::Sender<Outgoing>>,
    capacity: usize,
    endpoint: String,
    replay_endpoint: Option<String>,
    data_parallel_rank: i64,
    published: Arc<AtomicU64>,
    dropped: AtomicU64,
    pub_task: Option<JoinHandle<()>>,
    replay_task: Option<JoinHandle<()>>,
}

impl KvEventPublisher {
    /// Sets up both sockets and starts the background tasks. Must run inside
    /// a Tokio runtime.
    pub async fn start(config: KvEventPublisherConfig) -> Result<Self, PublisherError> {
        let mut pub_socket = PubSocket::new();
        let endpoint = attach(&mut pub_socket, &config.endpoint, config.mode)
            .await
            .map_err(|source| PublisherError::Pub {
                endpoint: config.endpoint.clone(),
                source,
            })?;
        let buffer: ReplayBuffer = Arc::new(Mutex::new(VecDeque::new()));
        let (replay_endpoint, replay_task) = match &config.replay_endpoint {
            Some(requested) => {
                let mut router = RouterSocket::new();
                let bound = attach(&mut router, requested, SocketMode::Bind)
                    .await
                    .map_err(|source| PublisherError::Replay {
                        endpoint: requested.clone(),
                        source,
                    })?;
                let task = tokio::spawn(serve_replays(
                    router,
                    Arc::clone(&buffer),
                    config.topic.clone(),
                    config.replay_send_timeout,
                ));
                (Some(bound), Some(task))
            }
            None => (None, None),
        };
        let capacity = config.queue_capacity.max(1);
        let (queue, rx) = mpsc::channel(capacity);
        let published = Arc::new(AtomicU64::new(0));
        let pub_task = tokio::spawn(send_batches(
            pub_socket,
            rx,
            config.topic,
            buffer,
            config.buffer_steps,
            Arc::clone(&published),
        ));
        tracing::info!(%endpoint, replay = ?replay_endpoint, "KV-event publisher started");
        Ok(Self {
            queue: Some(queue),
            capacity,
            endpoint,
            replay_endpoint,
            data_parallel_rank: config.data_parallel_rank,
            published,
            dropped: AtomicU64::new(0),
            pub_task: Some(pub_task),
            replay_task,
        })
    }

    /// The PUB endpoint in use (with the real port when bound to port 0).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bound replay endpoint, if replay is enabled.
    pub fn replay_endpoint(&self) -> Option<&str> {
        self.replay_endpoint.as_deref()
    }

    /// Encodes and queues one batch without waiting. A `None` rank is filled
    /// with the configured one, as vLLM does.
    pub fn publish(&self, mut batch: KvEventBatch) -> Result<(), PublishError> {
        batch
            .data_parallel_rank
            .get_or_insert(self.data_parallel_rank);
        self.publish_payload(Bytes::from(encode_batch(&batch)?))
    }

    /// Queues an already-encoded payload as is (tests use it to send bytes a
    /// real engine recorded, or malformed ones).
    pub fn publish_payload(&self, payload: Bytes) -> Result<(), PublishError> {
        self.enqueue(Outgoing {
            payload,
            send: true,
        })
    }

    /// Numbers and buffers a batch for replay but does not send it, as when
    /// ZeroMQ drops a message at a subscriber's high-water mark: subscribers
    /// see a gap that the replay socket can fill (fault injection).
    pub fn publish_lost(&self, mut batch: KvEventBatch) -> Result<(), PublishError> {
        batch
            .data_parallel_rank
            .get_or_insert(self.data_parallel_rank);
        self.enqueue(Outgoing {
            payload: Bytes::from(encode_batch(&batch)?),
            send: false,
        })
    }

    fn enqueue(&self, item: Outgoing) -> Result<(), PublishError> {
        let queue = self.queue.as_ref().ok_or(PublishError::Closed)?;
        match queue.try_send(item) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(dropped, "KV-event publish queue full; batch dropped");
                Err(PublishError::QueueFull {
                    capacity: self.capacity,
                })
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(PublishError::Closed),
        }
    }

    /// Batches sent so far; the next batch gets this sequence number.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Batches dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Sends what is queued (waiting at most `timeout`), then closes both
    /// sockets.
    pub async fn shutdown(mut self, timeout: Duration) {
        self.queue = None;
        if let Some(task) = self.pub_task.take()
            && tokio::time::timeout(timeout, task).await.is_err()
        {
            tracing::warn!("KV-event publisher did not drain its queue in {timeout:?}");
        }
        if let Some(task) = self.replay_task.take() {
            task.abort();
        }
    }
}

impl Drop for KvEventPublisher {
    /// The send task ends by itself once the queue closes; the replay task
    /// would wait for requests forever, so it is stopped here.
    fn drop(&mut self) {
        if let Some(task) = self.replay_task.take() {
            task.abort();
        }
    }
}

/// Numbers, sends and buffers batches in order until the queue closes.
async fn send_batches(
    mut socket: PubSocket,
    mut rx: mpsc::Receiver<Outgoing>,
    topic: String,
    buffer: ReplayBuffer,
    buffer_steps: usize,
    published: Arc<AtomicU64>,
) {
    let mut seq: u64 = 0;
    while let Some(Outgoing { payload, send }) = rx.recv().await {
        let message = PubMessage {
            topic: topic.clone(),
            seq,
            payload: payload.clone(),
        };
        match ZmqMessage::try_from(message.into_frames()) {
            Ok(_) if !send => tracing::debug!(seq, "KV-event batch buffered, not sent (fault)"),
            Ok(message) => {
                if let Err(error) = socket.send(message).await {
                    tracing::warn!(seq, %error, "KV-event PUB send failed");
                }
            }
            Err(error) => tracing::warn!(seq, %error, "KV-event message not built"),
        }
        if buffer_steps > 0 {
            let mut buffer = buffer
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if buffer.len() >= buffer_steps {
                buffer.pop_front();
            }
            buffer.push_back((seq, payload));
        }
        seq = seq.wrapping_add(1);
        published.store(seq, Ordering::Relaxed);
    }
}

/// Answers replay requests like vLLM 0.33's `_service_replay`.
async fn serve_replays(
    mut router: RouterSocket,
    buffer: ReplayBuffer,
    topic: String,
    send_timeout: Duration,
) {
    loop {
        let frames = match router.recv().await {
            Ok(message) => message.into_vec(),
            Err(error) => {
                tracing::debug!(%error, "KV-event replay socket receive failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let request = match ReplayRequest::from_router_frames(frames) {
            Ok(request) => request,
            Err(error) => {
                // vLLM logs and ignores such a request, sending nothing back.
                tracing::warn!(%error, "invalid KV-event replay request ignored");
                continue;
            }
        };
        let batches: Vec<(u64, Bytes)> = {
            let buffer = buffer
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            buffer
                .iter()
                .filter(|(seq, _)| *seq >= request.start_seq)
                .cloned()
                .collect()
        };
        tracing::debug!(
            start = request.start_seq,
            count = batches.len(),
            "KV-event replay"
        );
        let identity = request.identity;
        let replies = batches
            .into_iter()
            .map(|(seq, payload)| replay_batch_frames(identity.clone(), &topic, seq, payload))
            .chain(std::iter::once(replay_end_frames(identity.clone())));
        for frames in replies {
            if let Err(error) = send_reply(&mut router, frames, send_timeout).await {
                tracing::warn!(%error, "KV-event replay abandoned");
                break;
            }
        }
    }
}

async fn send_reply(
    router: &mut RouterSocket,
    frames: Vec<Bytes>,
    timeout: Duration,
) -> Result<(), String> {
    let message = ZmqMessage::try_from(frames).map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, router.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("client did not take a reply within {timeout:?}")),
    }
}
