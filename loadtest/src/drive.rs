//! Sends a [`Plan`] through a client on schedule: each session is a task
//! that sends its turns in order (a turn waits for its planned time and for
//! the previous answer), while an optional event (a scenario's fault) runs
//! at its own time. Returns one [`Sample`] per request.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::client::{Client, Outcome, chat_body, completion_body};
use crate::metrics::Sample;
use crate::twins::Exchange;
use crate::workload::{Message, Plan, Prompt, Session, Turn};

/// How requests are sent.
#[derive(Debug, Clone)]
pub struct DriveOptions {
    /// The `model` of every request.
    pub model: String,
    /// Stream answers (SSE) and measure time to first token.
    pub stream: bool,
}

/// What a drive gave: the samples and, if an event ran, when (seconds from
/// the start) and its result.
#[derive(Debug)]
pub struct Driven<R> {
    /// One per request, in no particular order.
    pub samples: Vec<Sample>,
    /// With an event, each sample's request and answer (`samples`' order),
    /// for [`twins`](crate::twins); else empty.
    pub exchanges: Vec<Exchange>,
    /// The event's start time and result.
    pub event: Option<(f64, R)>,
    /// When the drive started (the samples' time 0).
    pub started: Instant,
}

/// Sends `plan` through `client`, ticking `progress` per answer; runs
/// `event` at its time (from the start of the drive) alongside.
pub async fn drive<R, F>(
    plan: &Plan,
    client: &Client,
    opts: &DriveOptions,
    progress: &ProgressBar,
    event: Option<(Duration, F)>,
) -> Driven<R>
where
    F: Future<Output = R>,
{
    let t0 = Instant::now();
    let keep = event.is_some();
    let failed = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    let dispatch = async {
        for session in &plan.sessions {
            tokio::time::sleep_until((t0 + session.turns[0].at).into()).await;
            let (client, opts, progress, failed) = (
                client.clone(),
                opts.clone(),
                progress.clone(),
                failed.clone(),
            );
            let session = session.clone();
            tasks.spawn(async move {
                run_session(session, &client, &opts, t0, keep, |ok| {
                    if !ok {
                        let f = failed.fetch_add(1, Ordering::Relaxed) + 1;
                        progress.set_message(format!("{f} failed"));
                    }
                    progress.inc(1);
                })
                .await
            });
        }
    };
    let event = async {
        match event {
            Some((at, f)) => {
                tokio::time::sleep_until((t0 + at).into()).await;
                let started = t0.elapsed().as_secs_f64();
                Some((started, f.await))
            }
            None => None,
        }
    };
    let ((), event) = tokio::join!(dispatch, event);
    let mut samples = Vec::with_capacity(plan.requests());
    let mut exchanges = Vec::new();
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok(s) => {
                for (sample, exchange) in s {
                    samples.push(sample);
                    exchanges.extend(exchange);
                }
            }
            // A panicking session task is a bug: surface it.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    Driven {
        samples,
        exchanges,
        event,
        started: t0,
    }
}

/// Sends a session's turns in order; chat turns resend the conversation.
/// With `keep`, each sample comes with its request and answer.
async fn run_session(
    session: Session,
    client: &Client,
    opts: &DriveOptions,
    t0: Instant,
    keep: bool,
    mut tick: impl FnMut(bool),
) -> Vec<(Sample, Option<Exchange>)> {
    let mut out = Vec::with_capacity(session.turns.len());
    let mut conversation: Vec<Message> = Vec::new();
    for (index, turn) in session.turns.into_iter().enumerate() {
        tokio::time::sleep_until((t0 + turn.at).into()).await;
        let (api, body) = body(&turn, &mut conversation, opts);
        let start_s = t0.elapsed().as_secs_f64();
        let o = client.send(api, &body).await;
        if matches!(turn.prompt, Prompt::Messages(_) | Prompt::FollowUp(_)) {
            conversation.push(Message::new("assistant", o.answer.clone()));
        }
        tick(o.ok());
        let exchange = keep.then(|| Exchange {
            api,
            body,
            answer: o.answer.clone(),
        });
        out.push((sample(start_s, index, &turn, o), exchange));
    }
    out
}

/// The request body of `turn`, extending the session's conversation.
fn body(
    turn: &Turn,
    conversation: &mut Vec<Message>,
    opts: &DriveOptions,
) -> (crate::workload::Api, Value) {
    let api = turn.prompt.api();
    let m = &opts.model;
    let body = match &turn.prompt {
        Prompt::Tokens(t) => completion_body(m, json!(t.expand()), turn.max_tokens, opts.stream),
        Prompt::Text(t) => completion_body(m, json!(t), turn.max_tokens, opts.stream),
        Prompt::Messages(msgs) => {
            *conversation = msgs.clone();
            chat_body(m, conversation, turn.max_tokens, opts.stream)
        }
        Prompt::FollowUp(user) => {
            conversation.push(Message::new("user", user.clone()));
            chat_body(m, conversation, turn.max_tokens, opts.stream)
        }
    };
    (api, body)
}

fn sample(start_s: f64, index: usize, turn: &Turn, o: Outcome) -> Sample {
    Sample {
        start_s,
        end_s: start_s + o.e2e.as_secs_f64(),
        ttft_ms: o.ttft.map(|d| d.as_secs_f64() * 1e3),
        e2e_ms: o.e2e.as_secs_f64() * 1e3,
        prompt_tokens: o
            .prompt_tokens
            .or_else(|| turn.prompt.known_tokens())
            .unwrap_or(0),
        cached_tokens: o.cached_tokens,
        completion_tokens: o.completion_tokens,
        worker: o.worker,
        error: o.error,
        turn: index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_ups_extend_the_conversation() {
        let opts = DriveOptions {
            model: "m".into(),
            stream: true,
        };
        let mut conv = Vec::new();
        let first = Turn {
            at: Duration::ZERO,
            prompt: Prompt::Messages(vec![Message::new("user", "a")]),
            max_tokens: 2,
        };
        let (_, b) = body(&first, &mut conv, &opts);
        assert_eq!(b["messages"].as_array().unwrap().len(), 1);
        conv.push(Message::new("assistant", " tok tok"));
        let next = Turn {
            prompt: Prompt::FollowUp("b".into()),
            ..first
        };
        let (api, b) = body(&next, &mut conv, &opts);
        assert_eq!(api, crate::workload::Api::Chat);
        let msgs = b["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[1]["content"], " tok tok");
        assert_eq!(msgs[2]["content"], "b");
    }
}
