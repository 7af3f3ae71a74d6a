//! vLLM's KV-cache events on the wire: the messages an engine's
//! `ZmqEventPublisher` sends when blocks enter or leave its prefix cache.
//!
//! The router learns which engine holds which blocks from these events, so
//! this module speaks the protocol exactly as vLLM's own code does (see
//! `shared/vllm/README.md`, "KV events on the wire", and the recorded vectors
//! next to it):
//!
//! * [`decode`](decode_batch) turns a payload into a [`KvEventBatch`], for
//!   both event formats (maps since vLLM 0.24, positional arrays before) and
//!   both hash encodings (ints, or digests as `bin`), within [`DecodeLimits`];
//! * [`encode`](encode_batch) writes vLLM 0.33's exact bytes, for simulated
//!   engines;
//! * the multipart shapes (PUB message, replay exchange): [`PubMessage`],
//!   [`ReplayRequest`], [`ReplayReply`].
//!
//! The ZeroMQ sockets that carry them live in the `worker` crate.
//!
//! All input is untrusted: malformed bytes or frames give errors, never
//! panics.

mod decode;
mod decode_fields;
mod encode;
mod event;
mod frames;
mod msgpack_read;
mod msgpack_write;
mod wire_error;

pub use decode::{DecodeError, DecodeLimits, decode_batch, decode_batch_with_limits};
pub use encode::{EncodeError, encode_batch};
pub use event::{BlockRemoved, BlockStored, EngineHash, KvEvent, KvEventBatch, UnknownEvent};
pub use frames::{
    FrameError, PubMessage, REPLAY_END_SEQ, ReplayReply, ReplayRequest, replay_batch_frames,
    replay_end_frames, replay_request_frames,
};
pub use wire_error::WireError;
