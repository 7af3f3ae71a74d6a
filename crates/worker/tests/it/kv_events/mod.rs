//! Conformance and live tests for `protocol::kv_events`, against the
//! vectors that vLLM's own code produced (`shared/vllm/kv_events.json` and
//! `zmq_live_capture.json`, see `shared/vllm/README.md`).
//!
//! * `vectors`: every recorded payload decodes to what the recording's
//!   generic decode says (both event formats, both hash encodings); replay
//!   frames parse; encoding a decoded 0.33 payload gives its exact bytes.
//! * `live`: a real publisher and subscriber over TCP loopback, replay
//!   included.
//! * `malformed`: bad input gives errors, never panics; `props`: the same
//!   with proptest, and encode/decode round trips.
//!
//! Expected values are always derived from the recordings (or from an
//! independent generic MessagePack decode with `rmpv`), never hard-coded.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod generic;
mod live;
mod malformed;
mod props;
mod vectors;
