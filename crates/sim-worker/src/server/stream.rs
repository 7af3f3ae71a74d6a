//! Streamed answers: one SSE chunk per output token of each choice, each
//! sent at the time the engine's schedule gives it
//! ([`Admission::token_at`]); the choices of a request with several
//! prompts interleave in time order, then come the usage chunk (when
//! asked) and `[DONE]`.
//!
//! Each choice's stream owns its [`RequestGuard`]: when the client goes
//! away hyper drops the body, and the guard aborts the request in the
//! engine (its blocks are freed; uncached if its prefill had not
//! completed). A [`StreamFault`] in force breaks the answer when a choice
//! reaches its token count: the connection is cut, an error event ends
//! the stream, or the process exits.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::config::{StreamFault, StreamFaultKind};
use super::core::SimCore;
use super::prompt::Kind;
use super::request::RequestGuard;
use super::responses::{Choice, Envelope, done_chunk, usage};
use crate::{Admission, Vocabulary};

/// One choice of an answer: its schedule and the tokens it generates
/// (indices in the [`Vocabulary`]).
pub struct Planned {
    /// Its schedule.
    pub admission: Admission,
    /// Its index among the request's prompts.
    pub index: usize,
    /// Its prompt's ids.
    pub prompt: Arc<[u32]>,
    /// What it generates, `admission.output_tokens` of them.
    pub tokens: Vec<usize>,
}

/// How long a broken answer waits before it breaks, so that the tokens it
/// sent before reach the client: a fault breaks an answer after exactly
/// `after_tokens` tokens.
const FLUSH_BEFORE_BREAK: std::time::Duration = std::time::Duration::from_millis(20);

/// What a choice's stream yields.
enum Event {
    Chunk(Bytes),
    Broken(StreamFaultKind),
}

/// What the whole body sends next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Choices,
    Done,
    End,
}

/// Exits the process now, as a crash does.
pub fn crash() -> ! {
    tracing::warn!("simulated crash (stream fault): exiting now");
    std::process::exit(super::CRASH_EXIT_CODE)
}

/// Whether token `i` of an answer of `len` tokens is where `fault` breaks it.
pub fn breaks_at(fault: Option<StreamFault>, i: usize, len: usize) -> Option<StreamFaultKind> {
    fault
        .filter(|f| f.after_tokens < len && i >= f.after_tokens)
        .map(|f| f.kind)
}

/// The SSE body of a streamed answer; see the module docs.
pub fn sse_body(
    core: Arc<SimCore>,
    vocab: Vocabulary,
    envelope: Envelope,
    choices: Vec<(RequestGuard, Planned)>,
    include_usage: bool,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let envelope = Arc::new(envelope);
    let admissions: Vec<Admission> = choices.iter().map(|(_, c)| c.admission).collect();
    let streams = choices.into_iter().map(|(guard, c)| {
        Box::pin(choice_stream(
            Arc::clone(&core),
            vocab.clone(),
            Arc::clone(&envelope),
            guard,
            c,
        )) as Pin<Box<dyn Stream<Item = Event> + Send>>
    });
    let merged = futures_util::stream::select_all(streams);
    futures_util::stream::unfold((merged, Phase::Choices), move |(mut merged, phase)| {
        let (envelope, admissions) = (Arc::clone(&envelope), admissions.clone());
        async move {
            let (item, next) = match phase {
                Phase::End => return None,
                Phase::Done => (Ok(done_chunk()), Phase::End),
                Phase::Choices => match merged.next().await {
                    Some(Event::Chunk(b)) => (Ok(b), Phase::Choices),
                    Some(Event::Broken(StreamFaultKind::Error)) => (
                        Ok(Envelope::error_chunk("the engine failed (simulated)")),
                        Phase::Done,
                    ),
                    Some(Event::Broken(_)) => (
                        Err(std::io::Error::other("stream cut (simulated fault)")),
                        Phase::End,
                    ),
                    None if include_usage => {
                        (Ok(envelope.usage_chunk(usage(&admissions))), Phase::Done)
                    }
                    None => (Ok(done_chunk()), Phase::End),
                },
            };
            Some((item, (merged, next)))
        }
    })
}

/// What one choice's stream sends next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Next {
    /// The chat role chunk.
    Role,
    /// Output token `i`.
    Token(usize),
    /// Nothing more.
    End,
}

struct ChoiceState {
    core: Arc<SimCore>,
    vocab: Vocabulary,
    envelope: Arc<Envelope>,
    plan: Planned,
    guard: Option<RequestGuard>,
    next: Next,
}

fn choice_stream(
    core: Arc<SimCore>,
    vocab: Vocabulary,
    envelope: Arc<Envelope>,
    guard: RequestGuard,
    plan: Planned,
) -> impl Stream<Item = Event> + Send + 'static {
    let first = match envelope.kind {
        Kind::Chat => Next::Role,
        Kind::Completions => Next::Token(0),
    };
    let state = ChoiceState {
        core,
        vocab,
        envelope,
        plan,
        guard: Some(guard),
        next: first,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        let choice = Choice {
            index: s.plan.index,
            prompt: &s.plan.prompt,
        };
        let event = match s.next {
            Next::End => return None,
            Next::Role => {
                s.wait_for(0).await;
                s.next = Next::Token(0);
                Event::Chunk(s.envelope.role_chunk(choice))
            }
            Next::Token(i) => {
                s.wait_for(i).await;
                let len = s.plan.tokens.len();
                if let Some(kind) = breaks_at(s.core.stream_fault(), i, len) {
                    // The tokens before the break were yielded; a body that
                    // is never pending again gives hyper no turn to write
                    // them out before the connection goes (a late timer on a
                    // busy machine makes every later token due at once).
                    tokio::time::sleep(FLUSH_BEFORE_BREAK).await;
                    if kind == StreamFaultKind::Crash {
                        crash();
                    }
                    s.next = Next::End;
                    return Some((Event::Broken(kind), s));
                }
                let last = i + 1 >= len;
                let t = s.plan.tokens.get(i).copied().unwrap_or(0);
                let chunk =
                    s.envelope
                        .token_chunk(choice, s.vocab.id(t), s.vocab.text(t), i == 0, last);
                if last {
                    s.next = Next::End;
                    if let Some(guard) = s.guard.take() {
                        guard.finish();
                    }
                } else {
                    s.next = Next::Token(i + 1);
                }
                Event::Chunk(chunk)
            }
        };
        Some((event, s))
    })
}

impl ChoiceState {
    /// Sleeps until output token `i` is due, and while the server is paused.
    async fn wait_for(&self, i: usize) {
        tokio::time::sleep_until(self.core.instant(self.plan.admission.token_at(i))).await;
        self.core.wait_unpaused().await;
    }
}
