//! The replay client: asks an engine's ROUTER socket for every buffered batch
//! from a sequence number on, after a subscriber noticed a gap.
//!
//! It uses a DEALER socket (a REQ socket would accept only the first of the
//! many replies) and a fresh one per replay, so a late reply to an abandoned
//! replay can never be mistaken for part of the next one.

use std::time::Duration;

use thiserror::Error;
use tokio::time::{Instant, timeout_at};
use zeromq::{DealerSocket, Socket, SocketOptions, SocketRecv, SocketSend, ZmqError, ZmqMessage};

use protocol::kv_events::KvEventBatch;
use protocol::kv_events::{DecodeError, DecodeLimits, decode_batch_with_limits};
use protocol::kv_events::{FrameError, ReplayReply, replay_request_frames};

/// Bounds for one replay.
#[derive(Debug, Clone, Copy)]
pub struct ReplayOptions {
    /// Longest wait for the connection and for each reply.
    pub timeout: Duration,
    /// Most batches accepted before giving up (vLLM buffers 10 000).
    pub max_batches: usize,
    /// Limits for decoding each replayed payload.
    pub limits: DecodeLimits,
}

impl Default for ReplayOptions {
    /// 5 s per step, up to 100 000 batches, default decode limits.
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
            max_batches: 100_000,
            limits: DecodeLimits::default(),
        }
    }
}

/// One replayed batch. Its payload is decoded separately from the others, so
/// one bad batch does not hide the rest; the caller decides what a decode
/// error means (usually: treat that sequence number as lost).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayedBatch {
    /// The topic, from vLLM >= 0.26 (`None` for older engines).
    pub topic: Option<String>,
    /// The batch's original sequence number.
    pub seq: u64,
    /// The decoded batch, or why its payload could not be decoded.
    pub batch: Result<KvEventBatch, DecodeError>,
}

/// A replay that did not reach the end marker.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The DEALER socket could not connect.
    #[error("connecting to KV-event replay endpoint {endpoint}: {source}")]
    Connect {
        /// The replay endpoint.
        endpoint: String,
        /// The ZeroMQ error.
        #[source]
        source: ZmqError,
    },
    /// Sending the request or receiving a reply failed.
    #[error("KV-event replay from {endpoint}: {source}")]
    Socket {
        /// The replay endpoint.
        endpoint: String,
        /// The ZeroMQ error.
        #[source]
        source: ZmqError,
    },
    /// No connection or no next reply within the timeout.
    #[error(
        "KV-event replay from {endpoint} timed out after {timeout:?} ({received} batches received)"
    )]
    Timeout {
        /// The replay endpoint.
        endpoint: String,
        /// The timeout that expired.
        timeout: Duration,
        /// Batches received before it expired.
        received: usize,
    },
    /// A reply did not have a replay shape.
    #[error("KV-event replay from {endpoint}: {source}")]
    Frames {
        /// The replay endpoint.
        endpoint: String,
        /// What was wrong with the reply.
        #[source]
        source: FrameError,
    },
    /// The subscriber was configured without a replay endpoint.
    #[error("no KV-event replay endpoint is configured")]
    NoEndpoint,
    /// More replies than [`ReplayOptions::max_batches`].
    #[error("KV-event replay from {endpoint} sent more than {max} batches")]
    TooManyBatches {
        /// The replay endpoint.
        endpoint: String,
        /// The limit.
        max: usize,
    },
}

/// Replays every batch with `seq >= start_seq` that the engine at `endpoint`
/// still buffers, in order, up to its end marker.
///
/// Batches older than the engine's buffer are silently absent (vLLM does not
/// say so); compare the first returned `seq` with `start_seq` to detect that.
pub async fn replay_from(
    endpoint: &str,
    start_seq: u64,
    options: &ReplayOptions,
) -> Result<Vec<ReplayedBatch>, ReplayError> {
    let mut socket_options = SocketOptions::default();
    socket_options.connect_timeout(options.timeout);
    let mut socket = DealerSocket::with_options(socket_options);
    let socket_error = |source| ReplayError::Socket {
        endpoint: endpoint.to_owned(),
        source,
    };
    let timed_out = |received| ReplayError::Timeout {
        endpoint: endpoint.to_owned(),
        timeout: options.timeout,
        received,
    };

    let deadline = Instant::now() + options.timeout;
    timeout_at(deadline, socket.connect(endpoint))
        .await
        .map_err(|_| timed_out(0))?
        .map_err(|source| ReplayError::Connect {
            endpoint: endpoint.to_owned(),
            source,
        })?;
    let request = ZmqMessage::try_from(replay_request_frames(start_seq))
        .map_err(|_| socket_error(ZmqError::Other("empty replay request")))?;
    timeout_at(deadline, socket.send(request))
        .await
        .map_err(|_| timed_out(0))?
        .map_err(socket_error)?;

    let mut batches = Vec::new();
    loop {
        let deadline = Instant::now() + options.timeout;
        let message = timeout_at(deadline, socket.recv())
            .await
            .map_err(|_| timed_out(batches.len()))?
            .map_err(socket_error)?;
        let reply = ReplayReply::from_dealer_frames(message.into_vec()).map_err(|source| {
            ReplayError::Frames {
                endpoint: endpoint.to_owned(),
                source,
            }
        })?;
        let (topic, seq, payload) = match reply {
            ReplayReply::End => break,
            ReplayReply::Batch {
                topic,
                seq,
                payload,
            } => (topic, seq, payload),
        };
        if batches.len() >= options.max_batches {
            return Err(ReplayError::TooManyBatches {
                endpoint: endpoint.to_owned(),
                max: options.max_batches,
            });
        }
        let batch = decode_batch_with_limits(&payload, &options.limits);
        if let Err(error) = &batch {
            tracing::warn!(seq, %error, "undecodable KV-event batch in replay");
        }
        batches.push(ReplayedBatch { topic, seq, batch });
    }
    tracing::debug!(
        endpoint,
        start_seq,
        count = batches.len(),
        "KV-event replay done"
    );
    Ok(batches)
}
