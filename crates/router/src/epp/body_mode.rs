//! [`Mode`]: how a body reaches the picker in one stream, from Envoy's
//! processing mode or, when Envoy names none, the picker's `--body-mode`.

use super::wire::BodySendMode;
use crate::config::BodyMode;

/// How a body reaches the picker in this stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Not sent.
    Skipped,
    /// In chunks, each answered before the next (headers answered first).
    Streamed,
    /// Whole, after the headers were answered.
    Buffered,
    /// Whole, or cut at Envoy's buffer limit.
    BufferedPartial,
    /// Chunks without waiting; the processor hands them back.
    FullDuplex,
}

impl Mode {
    /// The mode Envoy names in a message's processing mode.
    pub(super) fn from_envoy(mode: i32) -> Mode {
        match BodySendMode::try_from(mode) {
            Ok(BodySendMode::Streamed) => Mode::Streamed,
            Ok(BodySendMode::Buffered) => Mode::Buffered,
            Ok(BodySendMode::BufferedPartial) => Mode::BufferedPartial,
            Ok(BodySendMode::FullDuplexStreamed) => Mode::FullDuplex,
            // GRPC mode is for gRPC upstreams, which an inference pool
            // is not: treated as not sent.
            _ => Mode::Skipped,
        }
    }
}

impl From<BodyMode> for Mode {
    fn from(m: BodyMode) -> Mode {
        match m {
            BodyMode::Buffered => Mode::Buffered,
            BodyMode::FullDuplexStreamed => Mode::FullDuplex,
        }
    }
}
