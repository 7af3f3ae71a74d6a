//! The relay of a migratable stream: the worker's events go to the
//! client through [`Answer`]; when the worker fails after its first byte
//! (the connection breaks, it ends before the answer, an error event, or
//! no chunk within the stall timeout) the answer moves to another worker
//! ([`Proxy::reroute`](super::super::Proxy)) and the same client stream
//! goes on. An answer still running on a draining worker at its drain
//! deadline ([`DrainWatch`](super::DrainWatch)) moves the same way. Past
//! the migration limit, or when the answer cannot be
//! continued exactly, the client gets an error event and the stream ends
//! without `[DONE]`. A non-streamed request's answer goes the same way
//! into an [`Assembly`] instead of the client's stream ([`whole`]): one
//! JSON answer at the end, or a 502 error when it could not move.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use axum::http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;

use super::answer::{Answer, Broken};
use super::assemble::{self, Assembly};
use super::drains::{DRAIN_REFRESH, Deadlines};
use super::sse::Events;
use super::sse::{event_data, sse};
use super::{Migration, MigrationSettings, Moved};
use crate::proxy::{InFlightGuard, Proxy};

type Upstream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// Room made in the output buffer at a time (an answer's events are a
/// few hundred bytes each).
const SCRATCH: usize = 4096;

/// `d` from now (a time past `Instant`'s range: in 30 years).
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

/// One stream being relayed.
struct Relay {
    proxy: Arc<Proxy>,
    settings: MigrationSettings,
    migration: Migration,
    upstream: Upstream,
    guard: Option<InFlightGuard>,
    /// The current worker's URL, and those that failed this answer.
    url: String,
    failed: Vec<String>,
    /// The drain deadlines this router knows (`None` once unwatchable),
    /// checked for a change when the timer fires.
    drains: Option<watch::Receiver<Deadlines>>,
    /// The current worker's drain deadline, read when the marks change.
    deadline: Option<Instant>,
    /// One timer for the stall timeout, the drain deadline and the check
    /// of the drain marks ([`DRAIN_REFRESH`]): re-armed only when it
    /// fires, so that a read touches neither the timer wheel nor the
    /// drain marks' notification.
    timer: Pin<Box<tokio::time::Sleep>>,
    events: Events,
    answer: Answer,
    /// What the client gets of the events of the current read, written
    /// once and split off as one frame; its allocation is reused once the
    /// client's frames are written.
    scratch: BytesMut,
    out: VecDeque<Bytes>,
    /// After `out`, the body ends.
    end: bool,
    /// A non-streamed request's answer, put together instead of `out`.
    assembly: Option<Assembly>,
    /// Why the answer ended unfinished (the error event's message).
    failure: Option<String>,
}

impl Relay {
    fn new(
        proxy: Arc<Proxy>,
        migration: Migration,
        resp: reqwest::Response,
        url: &str,
        guard: InFlightGuard,
    ) -> Self {
        let assembly = (!migration.eligible.streamed).then(|| Assembly::new(&migration.eligible));
        let mut relay = Relay {
            settings: proxy.migration,
            drains: Some(proxy.drains.subscribe()),
            deadline: None,
            timer: Box::pin(tokio::time::sleep(
                proxy.migration.stall_timeout.min(DRAIN_REFRESH),
            )),
            proxy,
            answer: Answer::new(migration.eligible.clone()),
            migration,
            upstream: Box::pin(resp.bytes_stream()),
            guard: Some(guard),
            url: url.to_owned(),
            failed: Vec::new(),
            events: Events::default(),
            scratch: BytesMut::new(),
            out: VecDeque::new(),
            end: false,
            assembly,
            failure: None,
        };
        relay.read_deadline();
        relay
    }

    /// Reads the current worker's drain deadline; the timer fires at it
    /// if it comes before the timer's time.
    fn read_deadline(&mut self) {
        self.deadline = self
            .drains
            .as_mut()
            .and_then(|d| d.borrow_and_update().get(&self.url).map(|(_, at)| *at));
        if let Some(at) = self.deadline
            && at < self.timer.deadline()
        {
            self.timer.as_mut().reset(at);
        }
    }
}

/// The client's body of a migratable answer from `resp` of the worker at
/// `url`; see the module docs.
pub(in crate::proxy) fn body(
    proxy: Arc<Proxy>,
    migration: Migration,
    resp: reqwest::Response,
    url: &str,
    guard: InFlightGuard,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let relay = Relay::new(proxy, migration, resp, url, guard);
    futures_util::stream::unfold(relay, |mut r| async move {
        loop {
            if let Some(b) = r.out.pop_front() {
                return Some((Ok(b), r));
            }
            if r.end {
                return None;
            }
            r.pull().await;
        }
    })
}

/// The answer to a non-streamed request whose worker at `url` streams
/// it (`resp`): relayed like a stream, moved when the worker fails, and
/// answered whole once it ended (the JSON object, or why it could not
/// move as a 502 error). `head` is the response's status and headers.
pub(in crate::proxy) async fn whole(
    proxy: Arc<Proxy>,
    migration: Migration,
    resp: reqwest::Response,
    url: &str,
    guard: InFlightGuard,
    head: axum::http::response::Builder,
) -> axum::response::Response {
    let mut r = Relay::new(proxy, migration, resp, url, guard);
    while !r.end {
        r.pull().await;
    }
    r.guard = None;
    let (status, answer) = match (r.failure, r.assembly) {
        (None, Some(a)) if r.answer.done => {
            let answer = &r.answer;
            (200, a.finish(|| answer.usage(&serde_json::Value::Null)))
        }
        (failure, _) => {
            let why = failure.unwrap_or_else(|| "the answer ended unfinished".into());
            (502, assemble::failed(&why))
        }
    };
    let mut head = head.status(status);
    if let Some(h) = head.headers_mut() {
        for name in [CONTENT_TYPE, CONTENT_LENGTH, CACHE_CONTROL] {
            h.remove(name);
        }
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    head.body(axum::body::Body::from(answer.to_string()))
        .unwrap_or_else(|_| axum::response::Response::new(axum::body::Body::empty()))
}

impl Relay {
    /// Reads the worker's next bytes (or notices it failed, or that its
    /// drain deadline passed).
    async fn pull(&mut self) {
        // The stall timeout counts from here: the relay waits for the
        // worker only once the client took what it had.
        let stall = after(self.settings.stall_timeout);
        let next = loop {
            tokio::select! {
                next = self.upstream.next() => break next,
                () = self.timer.as_mut() => {
                    match self.drains.as_ref().map(watch::Receiver::has_changed) {
                        Some(Ok(true)) => self.read_deadline(),
                        Some(Err(_)) => self.drains = None,
                        _ => {}
                    }
                    let now = Instant::now();
                    if self.deadline.is_some_and(|at| at <= now) {
                        return self
                            .failover(Broken("the worker's drain deadline passed".into()))
                            .await;
                    }
                    if stall <= now {
                        let broken = Broken(format!(
                            "no chunk for {:?} (--stall-timeout)",
                            self.settings.stall_timeout
                        ));
                        return self.failover(broken).await;
                    }
                    let mut at = self.deadline.map_or(stall, |d| d.min(stall));
                    if self.drains.is_some() {
                        at = at.min(now + DRAIN_REFRESH);
                    }
                    self.timer.as_mut().reset(at);
                }
            }
        };
        let broken = match next {
            Some(Ok(bytes)) => {
                if !bytes.is_empty()
                    && let Some(g) = self.guard.as_mut()
                {
                    g.first_byte();
                }
                match self.read(bytes) {
                    Ok(()) => return,
                    Err(b) => b,
                }
            }
            Some(Err(e)) => Broken(format!("the stream broke: {e}")),
            None if self.answer.done => {
                self.end = true;
                return;
            }
            None => Broken("the worker closed the stream before the answer ended".into()),
        };
        self.failover(broken).await;
    }

    /// Splits `bytes` into events and relays them: what the client gets of
    /// the events of one read leaves as one frame.
    fn read(&mut self, bytes: Bytes) -> Result<(), Broken> {
        self.events
            .push(bytes)
            .map_err(|_| Broken("an event over 16 MiB".into()))?;
        let read = self.read_events();
        if !self.scratch.is_empty() {
            self.out.push_back(self.scratch.split().freeze());
        }
        read
    }

    /// Relays the complete events held, into `scratch` (or the assembly).
    fn read_events(&mut self) -> Result<(), Broken> {
        while let Some((raw, data)) = self.events.next_data() {
            // Room when this event may not fit (`reserve` reclaims the
            // buffer in place once the frames split off it are written).
            if self.scratch.capacity() - self.scratch.len() < raw.len() {
                self.scratch.reserve(raw.len().max(SCRATCH));
            }
            let start = self.scratch.len();
            self.answer.on_event(&raw, &data, &mut self.scratch)?;
            if let Some(a) = self.assembly.as_mut() {
                let out = self.scratch.get(start..);
                a.add(out.and_then(event_data).unwrap_or(&data));
                self.scratch.truncate(start);
            }
            if self.answer.done {
                // The answer is whole: what follows is not the client's.
                self.guard = None;
                self.end = true;
                return Ok(());
            }
        }
        Ok(())
    }

    /// The worker failed: moves the answer to another, or ends it with an
    /// error event.
    async fn failover(&mut self, broken: Broken) {
        self.guard = None;
        self.events.clear();
        self.failed.push(std::mem::take(&mut self.url));
        tracing::warn!(reason = %broken.0, moves = self.answer.moves, "an answer's worker failed mid-stream");
        let why_not = if self.answer.moves >= self.settings.limit {
            Some("the migration limit was reached".to_owned())
        } else {
            self.answer.stuck().map(|s| format!("not migratable: {s}"))
        };
        if let Some(why) = why_not {
            return self.give_up(&broken, &why, "not_migrated");
        }
        let (continued, body, tokens) = match self.answer.next_request(&self.migration.body) {
            Ok(next) => next,
            Err(b) => return self.give_up(&broken, &b.0, "not_migrated"),
        };
        let moved = self
            .proxy
            .reroute(&self.migration, continued, body, &tokens, &self.failed)
            .await;
        match moved {
            Ok(Moved {
                resp,
                guard,
                url,
                worker,
            }) => {
                tracing::info!(worker, continued, "answer moved to another worker");
                metrics::counter!("prefix_router_migrations_total", "outcome" => "migrated")
                    .increment(1);
                self.answer.moved(continued);
                self.upstream = Box::pin(resp.bytes_stream());
                self.guard = Some(guard);
                self.url = url;
                self.read_deadline();
            }
            Err(e) => self.give_up(&broken, &e, "failed"),
        }
    }

    /// Ends the client's stream with an error event (no `[DONE]`).
    fn give_up(&mut self, broken: &Broken, why: &str, outcome: &'static str) {
        metrics::counter!("prefix_router_migrations_total", "outcome" => outcome).increment(1);
        let message = format!("the worker failed mid-answer ({}); {why}", broken.0);
        tracing::warn!(%message, "answer not migrated");
        if self.assembly.is_none() {
            self.out.push_back(sse(&assemble::failed(&message)));
        }
        self.failure = Some(message);
        self.end = true;
    }
}
