//! [`Ticket`]: an admitted request's hold on its tenant's limits until its
//! answer ends: the place in flight it takes, the tokens reserved for it,
//! corrected by the answer's `usage` when the engine reports one. Dropped
//! without an answer (an error, a client gone), it releases its place and
//! keeps the reservation. [`settle_with_body`] follows a response's body
//! to its end for `serve`; the endpoint picker settles from its own view of
//! the response.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::Stream;
use state::Gcra;

use super::limiter::{Counted, Limiter};
use super::usage::UsageTail;

/// An admitted request's hold on its tenant's limits.
pub struct Ticket {
    inner: Option<Held>,
}

struct Held {
    limiter: Arc<Limiter>,
    tenant: String,
    label: String,
    /// The tokens limit, when one applies (the reservation is corrected).
    tokens: Option<Gcra>,
    reserved: u64,
    counted: Counted,
}

impl Ticket {
    /// A ticket that holds nothing (no limit applies).
    pub fn none() -> Ticket {
        Ticket { inner: None }
    }

    pub(super) fn new(
        limiter: Arc<Limiter>,
        tenant: String,
        label: String,
        tokens: Option<Gcra>,
        reserved: u64,
        counted: Counted,
    ) -> Ticket {
        Ticket {
            inner: Some(Held {
                limiter,
                tenant,
                label,
                tokens,
                reserved,
                counted,
            }),
        }
    }

    /// Whether the answer's usage corrects the reservation (so it is worth
    /// reading).
    pub fn wants_usage(&self) -> bool {
        self.inner.as_ref().is_some_and(|h| h.tokens.is_some())
    }

    /// Whether dropping or settling does anything.
    pub fn holds_anything(&self) -> bool {
        self.inner.is_some()
    }

    /// The answer ended having used `used` tokens (prompt and completion),
    /// when known; else the reservation stands.
    pub fn settle(mut self, used: Option<u64>) {
        self.finish(used);
    }

    fn finish(&mut self, used: Option<u64>) {
        let Some(h) = self.inner.take() else {
            return;
        };
        let charged = used.unwrap_or(h.reserved);
        metrics::counter!("prefix_router_tenant_tokens_total", "tenant" => h.label.clone())
            .increment(charged);
        let delta = match (h.tokens, used) {
            (Some(_), Some(used)) => {
                i64::try_from(used).unwrap_or(i64::MAX) - i64::try_from(h.reserved).unwrap_or(0)
            }
            _ => 0,
        };
        h.limiter.settle(h.tenant, h.tokens, delta, h.counted);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.finish(None);
    }
}

/// `resp` with its body followed to its end, when `ticket` holds anything:
/// the ticket is settled with the answer's usage then (a 2xx answer whose
/// usage is not found keeps the reservation; an error answer used none),
/// or dropped with the body (client gone).
pub fn settle_with_body(resp: Response, ticket: Ticket) -> Response {
    if !ticket.holds_anything() {
        return resp;
    }
    let success = resp.status().is_success();
    let tail = (success && ticket.wants_usage()).then(UsageTail::default);
    let (parts, body) = resp.into_parts();
    let body = Body::from_stream(Settling {
        inner: body.into_data_stream(),
        tail,
        success,
        ticket: Some(ticket),
    });
    Response::from_parts(parts, body)
}

struct Settling<S> {
    inner: S,
    tail: Option<UsageTail>,
    success: bool,
    ticket: Option<Ticket>,
}

impl<S> Stream for Settling<S>
where
    S: Stream<Item = Result<Bytes, axum::Error>> + Unpin,
{
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = Pin::new(&mut self.inner).poll_next(cx);
        match &next {
            Poll::Ready(Some(Ok(bytes))) => {
                if let Some(tail) = self.tail.as_mut() {
                    tail.feed(bytes);
                }
            }
            Poll::Ready(None) => {
                let used = match &self.tail {
                    Some(tail) => tail.usage().map(|u| u.prompt_tokens + u.completion_tokens),
                    None if !self.success => Some(0),
                    None => None,
                };
                if let Some(ticket) = self.ticket.take() {
                    ticket.settle(used);
                }
            }
            _ => {}
        }
        next
    }
}
