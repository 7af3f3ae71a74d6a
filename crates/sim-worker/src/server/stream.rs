//! Streamed answers: one SSE chunk per output token, each sent at the time
//! the engine's schedule gives it ([`Admission::token_at`]).
//!
//! The body owns the request's [`RequestGuard`]: when the client goes away
//! hyper drops the body, and the guard aborts the request in the engine
//! (its blocks are freed; uncached if its prefill had not completed).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;

use super::core::SimCore;
use super::prompt::Kind;
use super::request::RequestGuard;
use super::responses::{Envelope, done_chunk};
use crate::Admission;

/// What the stream sends next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The chat role chunk, with the first token.
    Role,
    /// Output token `i`.
    Token(usize),
    /// The usage chunk.
    Usage,
    /// `data: [DONE]`.
    Done,
    /// Nothing more.
    End,
}

struct State {
    core: Arc<SimCore>,
    guard: Option<RequestGuard>,
    admission: Admission,
    envelope: Envelope,
    include_usage: bool,
    filler: Arc<str>,
    next: Next,
}

/// The SSE body of a streamed answer; see the module docs.
pub fn sse_body(
    core: Arc<SimCore>,
    guard: RequestGuard,
    admission: Admission,
    envelope: Envelope,
    include_usage: bool,
    filler: Arc<str>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let first = match envelope.kind {
        Kind::Chat => Next::Role,
        Kind::Completions => Next::Token(0),
    };
    let state = State {
        core,
        guard: Some(guard),
        admission,
        envelope,
        include_usage,
        filler,
        next: first,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        let chunk = match s.next {
            Next::End => return None,
            Next::Role => {
                s.wait_for(0).await;
                s.next = Next::Token(0);
                s.envelope.role_chunk()
            }
            Next::Token(i) => {
                s.wait_for(i).await;
                let last = i + 1 >= s.admission.output_tokens;
                s.next = match (last, s.include_usage) {
                    (false, _) => Next::Token(i + 1),
                    (true, true) => Next::Usage,
                    (true, false) => Next::Done,
                };
                s.envelope.token_chunk(&s.filler, last)
            }
            Next::Usage => {
                s.next = Next::Done;
                s.envelope.usage_chunk(&s.admission)
            }
            Next::Done => {
                if let Some(guard) = s.guard.take() {
                    guard.finish();
                }
                s.next = Next::End;
                done_chunk()
            }
        };
        Some((Ok(chunk), s))
    })
}

impl State {
    /// Sleeps until output token `i` is due, and while the server is paused.
    async fn wait_for(&self, i: usize) {
        tokio::time::sleep_until(self.core.instant(self.admission.token_at(i))).await;
        self.core.wait_unpaused().await;
    }
}
