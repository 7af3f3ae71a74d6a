//! [`KvEventSubscriber`]: the router-side end of an engine's KV-event stream,
//! as the reporter sidecar uses it.
//!
//! A SUB socket receives `[topic, seq, payload]` messages and decodes them.
//! A bad message (wrong frames, undecodable payload) is returned as an error
//! and the subscriber carries on with the next one. ZeroMQ reconnects a
//! dropped connection by itself and resends the subscription; the subscriber
//! logs sequence gaps and restarts (sequence going backwards) so a lost
//! stretch is visible, and [`KvEventSubscriber::replay`] fetches it again.

use std::time::Duration;

use thiserror::Error;
use zeromq::{Socket, SocketOptions, SocketRecv, SubSocket, ZmqError};

use super::drift::Drift;
use super::endpoint::{SocketMode, attach};
use super::replay::{ReplayError, ReplayOptions, ReplayedBatch, replay_from};
use protocol::kv_events::KvEventBatch;
use protocol::kv_events::{DecodeError, DecodeLimits, decode_batch_with_limits};
use protocol::kv_events::{FrameError, PubMessage};

/// How to set up a [`KvEventSubscriber`].
#[derive(Debug, Clone)]
pub struct KvEventSubscriberConfig {
    /// The engine's PUB endpoint (or, with [`SocketMode::Bind`], where to
    /// listen for an engine whose PUB socket connects).
    pub endpoint: String,
    /// Connect (the default) or bind; see [`SocketMode::vllm_pub_mode`].
    pub mode: SocketMode,
    /// Topic prefix to subscribe to; `""` receives everything.
    pub topic: String,
    /// The engine's replay (ROUTER) endpoint, if it has one.
    pub replay_endpoint: Option<String>,
    /// Bounds for replays.
    pub replay: ReplayOptions,
    /// How long the first connection may take.
    pub connect_timeout: Duration,
    /// Limits for decoding each payload.
    pub limits: DecodeLimits,
}

impl KvEventSubscriberConfig {
    /// Subscribes to everything at `endpoint`, with default bounds and no
    /// replay endpoint.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            mode: SocketMode::Connect,
            topic: String::new(),
            replay_endpoint: None,
            replay: ReplayOptions::default(),
            connect_timeout: Duration::from_secs(30),
            limits: DecodeLimits::default(),
        }
    }
}

/// What went wrong while setting up or receiving.
#[derive(Debug, Error)]
pub enum SubscriberError {
    /// The SUB socket could not connect, bind or subscribe.
    #[error("KV-event SUB socket on {endpoint}: {source}")]
    Setup {
        /// The configured endpoint.
        endpoint: String,
        /// The ZeroMQ error.
        #[source]
        source: ZmqError,
    },
    /// Receiving failed (typically the engine went away); ZeroMQ keeps
    /// reconnecting, so receiving again is the right reaction.
    #[error("KV-event SUB receive from {endpoint}: {source}")]
    Transport {
        /// The configured endpoint.
        endpoint: String,
        /// The ZeroMQ error.
        #[source]
        source: ZmqError,
    },
    /// A message without vLLM's three frames.
    #[error("KV-event message from {endpoint}: {source}")]
    Frames {
        /// The configured endpoint.
        endpoint: String,
        /// What was wrong with it.
        #[source]
        source: FrameError,
    },
    /// A well-framed message whose payload did not decode; `seq` names the
    /// batch that is lost.
    #[error("KV-event batch {seq} (topic {topic:?}) from {endpoint}: {source}")]
    Decode {
        /// The configured endpoint.
        endpoint: String,
        /// The message's topic.
        topic: String,
        /// The message's sequence number.
        seq: u64,
        /// Why it did not decode.
        #[source]
        source: DecodeError,
    },
}

impl SubscriberError {
    /// Whether the subscriber can keep receiving after this error (all but
    /// setup errors).
    pub fn is_recoverable(&self) -> bool {
        !matches!(self, Self::Setup { .. })
    }
}

/// One decoded message of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedBatch {
    /// The message's topic.
    pub topic: String,
    /// The engine's sequence number for this batch.
    pub seq: u64,
    /// The decoded batch.
    pub batch: KvEventBatch,
}

/// Receives and decodes one engine's KV events; see the module docs.
pub struct KvEventSubscriber {
    socket: SubSocket,
    config: KvEventSubscriberConfig,
    local_endpoint: String,
    last_seq: Option<u64>,
    drift: Drift,
}

impl KvEventSubscriber {
    /// Connects (or binds) and subscribes. With [`SocketMode::Connect`] this
    /// waits until the engine's endpoint accepts the connection, up to
    /// `connect_timeout`.
    pub async fn start(config: KvEventSubscriberConfig) -> Result<Self, SubscriberError> {
        let setup_error = |source| SubscriberError::Setup {
            endpoint: config.endpoint.clone(),
            source,
        };
        let mut options = SocketOptions::default();
        options.connect_timeout(config.connect_timeout);
        let mut socket = SubSocket::with_options(options);
        socket.subscribe(&config.topic).await.map_err(setup_error)?;
        let local_endpoint = attach(&mut socket, &config.endpoint, config.mode)
            .await
            .map_err(setup_error)?;
        tracing::info!(endpoint = %local_endpoint, mode = ?config.mode, topic = %config.topic,
            "KV-event subscriber started");
        Ok(Self {
            socket,
            config,
            local_endpoint,
            last_seq: None,
            drift: Drift::default(),
        })
    }

    /// The endpoint in use: the engine's, or the bound one (real port) in
    /// bind mode.
    pub fn endpoint(&self) -> &str {
        &self.local_endpoint
    }

    /// The sequence number of the last well-framed message.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    /// Waits for the next message and decodes it. Every error except
    /// [`SubscriberError::Setup`] leaves the subscriber usable.
    pub async fn recv(&mut self) -> Result<ReceivedBatch, SubscriberError> {
        let endpoint = &self.local_endpoint;
        let message = match self.socket.recv().await {
            Ok(message) => message,
            Err(source) => {
                tracing::warn!(%endpoint, error = %source,
                    "KV-event SUB receive failed; ZeroMQ will reconnect");
                // Keeps a caller that retries at once from spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(SubscriberError::Transport {
                    endpoint: endpoint.clone(),
                    source,
                });
            }
        };
        let message = PubMessage::from_frames(message.into_vec()).map_err(|source| {
            tracing::warn!(%endpoint, error = %source, "malformed KV-event message");
            SubscriberError::Frames {
                endpoint: endpoint.clone(),
                source,
            }
        })?;
        self.note_seq(message.seq);
        let endpoint = &self.local_endpoint;
        match decode_batch_with_limits(&message.payload, &self.config.limits) {
            Ok(batch) => {
                self.drift.unknown(endpoint, &batch);
                Ok(ReceivedBatch {
                    topic: message.topic,
                    seq: message.seq,
                    batch,
                })
            }
            Err(source) => {
                self.drift.undecodable(endpoint, message.seq, &source);
                Err(SubscriberError::Decode {
                    endpoint: endpoint.clone(),
                    topic: message.topic,
                    seq: message.seq,
                    source,
                })
            }
        }
    }

    /// Logs gaps and restarts in the sequence.
    fn note_seq(&mut self, seq: u64) {
        let endpoint = &self.local_endpoint;
        match self.last_seq {
            Some(last) if seq == last.wrapping_add(1) => {}
            Some(last) if seq > last => {
                tracing::warn!(%endpoint, last, seq, missed = seq - last - 1,
                    "gap in KV-event sequence");
            }
            Some(last) => {
                tracing::warn!(%endpoint, last, seq,
                    "KV-event sequence went backwards; engine restarted?");
            }
            None => tracing::debug!(%endpoint, seq, "first KV-event batch"),
        }
        self.last_seq = Some(seq);
    }

    /// Replays buffered batches from `start_seq` on via the configured
    /// replay endpoint; see [`replay_from`].
    pub async fn replay(&self, start_seq: u64) -> Result<Vec<ReplayedBatch>, ReplayError> {
        let Some(endpoint) = &self.config.replay_endpoint else {
            return Err(ReplayError::NoEndpoint);
        };
        replay_from(endpoint, start_seq, &self.config.replay).await
    }
}
