//! The ZeroMQ multipart shapes of vLLM's `ZmqEventPublisher`: the 3-frame PUB
//! message and the replay exchange on its ROUTER socket.
//!
//! ```text
//! PUB message          [topic (utf-8), seq (u64 BE), payload]
//! replay request       ["", start_seq (u64 BE)]              DEALER -> ROUTER
//! replay reply >= 0.26 ["", topic, seq, payload]             one per buffered batch
//! replay reply <  0.26 ["", seq, payload]
//! end marker           ["", "", ff*8, ""]  (< 0.26: ["", ff*8, ""])
//! ```
//!
//! Shapes are as a DEALER sees them. A REQ client has the empty delimiter
//! stripped, which makes a >= 0.26 reply look exactly like a PUB message, but
//! a REQ socket only ever receives the first reply, so it cannot replay.
//! Parsing never panics: every wrong count or width is a [`FrameError`].

use bytes::Bytes;
use thiserror::Error;

/// The sequence number vLLM's end-of-replay marker carries (`-1` as a signed
/// 64-bit big-endian integer, i.e. eight `0xff` bytes).
pub const REPLAY_END_SEQ: u64 = u64::MAX;

/// A multipart message that does not have one of vLLM's shapes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The number of frames fits none of the expected shapes.
    #[error("{what}: {got} frame(s), expected {expected}")]
    FrameCount {
        /// Which message was being parsed.
        what: &'static str,
        /// How many frames it had.
        got: usize,
        /// The accepted counts.
        expected: &'static str,
    },
    /// A sequence-number frame that is not exactly 8 bytes.
    #[error("{what}: sequence frame is {len} byte(s), expected 8")]
    SeqWidth {
        /// Which message was being parsed.
        what: &'static str,
        /// The frame's length.
        len: usize,
    },
    /// A topic frame that is not UTF-8 (vLLM encodes a Python `str`).
    #[error("{what}: topic frame is not valid UTF-8")]
    TopicNotUtf8 {
        /// Which message was being parsed.
        what: &'static str,
    },
    /// A replay reply without the empty delimiter frame a DEALER receives.
    #[error("replay reply: first frame must be the empty delimiter, got {len} byte(s)")]
    MissingDelimiter {
        /// The first frame's length.
        len: usize,
    },
}

fn seq_from(what: &'static str, frame: &[u8]) -> Result<u64, FrameError> {
    let bytes: [u8; 8] = frame.try_into().map_err(|_| FrameError::SeqWidth {
        what,
        len: frame.len(),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

fn topic_from(what: &'static str, frame: &Bytes) -> Result<String, FrameError> {
    String::from_utf8(frame.to_vec()).map_err(|_| FrameError::TopicNotUtf8 { what })
}

/// One message of the engine's PUB socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubMessage {
    /// The configured topic (`""` by default); SUB filters match its prefix.
    pub topic: String,
    /// Per-publisher sequence number, from 0, one per batch.
    pub seq: u64,
    /// The msgpack-encoded `KVEventBatch`.
    pub payload: Bytes,
}

impl PubMessage {
    /// Parses `[topic, seq, payload]`.
    pub fn from_frames(frames: Vec<Bytes>) -> Result<Self, FrameError> {
        const WHAT: &str = "pub message";
        let [topic, seq, payload]: [Bytes; 3] =
            frames
                .try_into()
                .map_err(|frames: Vec<Bytes>| FrameError::FrameCount {
                    what: WHAT,
                    got: frames.len(),
                    expected: "3",
                })?;
        Ok(Self {
            topic: topic_from(WHAT, &topic)?,
            seq: seq_from(WHAT, &seq)?,
            payload,
        })
    }

    /// The three frames vLLM sends.
    pub fn into_frames(self) -> Vec<Bytes> {
        vec![
            Bytes::from(self.topic.into_bytes()),
            Bytes::copy_from_slice(&self.seq.to_be_bytes()),
            self.payload,
        ]
    }
}

/// The frames a DEALER sends to ask for every buffered batch from `start_seq`
/// on: `["", start_seq BE]`.
pub fn replay_request_frames(start_seq: u64) -> Vec<Bytes> {
    vec![
        Bytes::new(),
        Bytes::copy_from_slice(&start_seq.to_be_bytes()),
    ]
}

/// A replay request as the engine's ROUTER receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRequest {
    /// The ROUTER's routing identity of the client, to address the replies.
    pub identity: Bytes,
    /// The first sequence number wanted.
    pub start_seq: u64,
}

impl ReplayRequest {
    /// Parses `[identity, delimiter, start_seq]` the way vLLM does: exactly
    /// three frames (vLLM ignores anything else), the delimiter's content
    /// unchecked, and the start read as a big-endian integer of any width
    /// (`int.from_bytes(frame, "big")`; values beyond `u64` saturate, which
    /// replays nothing).
    pub fn from_router_frames(frames: Vec<Bytes>) -> Result<Self, FrameError> {
        let [identity, _delimiter, start]: [Bytes; 3] =
            frames
                .try_into()
                .map_err(|frames: Vec<Bytes>| FrameError::FrameCount {
                    what: "replay request",
                    got: frames.len(),
                    expected: "3 (identity, delimiter, start_seq)",
                })?;
        let split = start.len().saturating_sub(8);
        let (high, low) = start.split_at(split);
        let start_seq = if high.iter().any(|b| *b != 0) {
            u64::MAX
        } else {
            low.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
        };
        Ok(Self {
            identity,
            start_seq,
        })
    }
}

/// One message a replaying DEALER receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayReply {
    /// A buffered batch.
    Batch {
        /// The topic (vLLM >= 0.26 sends it; `None` for older engines).
        topic: Option<String>,
        /// The batch's original sequence number.
        seq: u64,
        /// The batch's payload, byte-identical to the PUB message's.
        payload: Bytes,
    },
    /// The end marker: nothing more follows for this request.
    End,
}

impl ReplayReply {
    /// Parses either reply shape (see the module docs). A sequence of
    /// [`REPLAY_END_SEQ`] is the end marker whatever the payload frame holds.
    pub fn from_dealer_frames(frames: Vec<Bytes>) -> Result<Self, FrameError> {
        const WHAT: &str = "replay reply";
        let count = frames.len();
        let mut frames = frames.into_iter();
        let (Some(delimiter), Some(second), Some(third)) =
            (frames.next(), frames.next(), frames.next())
        else {
            return Err(FrameError::FrameCount {
                what: WHAT,
                got: count,
                expected: "3 or 4",
            });
        };
        if !delimiter.is_empty() {
            return Err(FrameError::MissingDelimiter {
                len: delimiter.len(),
            });
        }
        let (topic, seq, payload) = match (frames.next(), frames.next()) {
            (None, _) => (None, second, third),
            (Some(payload), None) => (Some(second), third, payload),
            (Some(_), Some(_)) => {
                return Err(FrameError::FrameCount {
                    what: WHAT,
                    got: count,
                    expected: "3 or 4",
                });
            }
        };
        let seq = seq_from(WHAT, &seq)?;
        if seq == REPLAY_END_SEQ {
            return Ok(Self::End);
        }
        let topic = topic.map(|t| topic_from(WHAT, &t)).transpose()?;
        Ok(Self::Batch {
            topic,
            seq,
            payload,
        })
    }
}

/// The frames vLLM 0.33's ROUTER sends for one buffered batch, identity
/// first: `[identity, "", topic, seq, payload]`.
pub fn replay_batch_frames(identity: Bytes, topic: &str, seq: u64, payload: Bytes) -> Vec<Bytes> {
    vec![
        identity,
        Bytes::new(),
        Bytes::copy_from_slice(topic.as_bytes()),
        Bytes::copy_from_slice(&seq.to_be_bytes()),
        payload,
    ]
}

/// The frames of vLLM 0.33's end marker, identity first:
/// `[identity, "", "", ff*8, ""]` (the topic frame is empty even when a topic
/// is configured).
pub fn replay_end_frames(identity: Bytes) -> Vec<Bytes> {
    vec![
        identity,
        Bytes::new(),
        Bytes::new(),
        Bytes::copy_from_slice(&REPLAY_END_SEQ.to_be_bytes()),
        Bytes::new(),
    ]
}
