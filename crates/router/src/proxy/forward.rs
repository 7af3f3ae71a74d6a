//! [`Upstream`]: the HTTP client to workers, and streaming responses back.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::response::Response;
use bytes::Bytes;
use futures_util::Stream;

use protocol::headers::WORKER_HEADER;

use super::InFlightGuard;

/// Hop-by-hop headers, which a proxy must not forward (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
    header::PROXY_AUTHORIZATION,
];

fn forwardable(name: &HeaderName) -> bool {
    !HOP_BY_HOP.contains(name)
        && name.as_str() != "keep-alive"
        && name.as_str() != "proxy-connection"
}

/// A pooled, keep-alive HTTP client with TCP_NODELAY, so streamed tokens
/// are not held back by Nagle's algorithm; one per serving thread
/// ([`state::serving_thread`]): a pooled connection's task runs on the
/// runtime that dialed it, so each thread relays over its own.
#[derive(Clone)]
pub struct Upstream {
    clients: std::sync::Arc<[reqwest::Client]>,
}

impl Upstream {
    /// Clients for `threads` serving threads whose connection attempts
    /// give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration, threads: usize) -> Result<Self, reqwest::Error> {
        let clients = (0..threads.max(1))
            .map(|_| {
                reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .connect_timeout(connect_timeout)
                    .pool_idle_timeout(Duration::from_secs(90))
                    .pool_max_idle_per_host(64)
                    .build()
            })
            .collect::<Result<_, _>>()?;
        Ok(Upstream { clients })
    }

    /// The current serving thread's client (`new` makes at least one).
    fn client(&self) -> &reqwest::Client {
        &self.clients[state::serving_thread() % self.clients.len()]
    }

    /// Sends the request to `base_url` + `path_and_query`; resolves when the
    /// worker's response headers arrive (errors before that are retryable).
    /// Hop-by-hop headers and those only the router sets
    /// (`protocol::headers::RESERVED`) are not sent.
    pub async fn send(
        &self,
        method: &Method,
        base_url: &str,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let url = format!("{}{}", base_url.trim_end_matches('/'), path_and_query);
        let mut req = self.client().request(method.clone(), url).body(body);
        for (name, value) in headers {
            if forwardable(name)
                && name != header::CONTENT_LENGTH
                && !protocol::headers::is_reserved(name.as_str())
            {
                req = req.header(name, value);
            }
        }
        req = req.header(header::VIA, crate::hop::VIA_MARK);
        req.send().await
    }
}

/// The worker's response as ours: status and headers as they came, the body
/// streamed chunk by chunk, unchanged; `guard` lives until the body ends.
/// `strip` names a header to drop (one the router asked for itself).
pub fn relay(
    resp: reqwest::Response,
    worker_id: &str,
    guard: InFlightGuard,
    strip: Option<&str>,
) -> Response {
    relay_noting(resp, worker_id, guard, strip, None)
}

/// As [`relay`]; a server-sent-event stream that breaks ends with an
/// error event saying so and `unmoved` (why the answer could not move to
/// another worker), without `[DONE]` (a final chunk written right before
/// a cut connection could be lost).
pub(super) fn relay_noting(
    resp: reqwest::Response,
    worker_id: &str,
    guard: InFlightGuard,
    strip: Option<&str>,
    unmoved: Option<&str>,
) -> Response {
    let builder = head(&resp, worker_id, strip);
    let sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let cut_event = unmoved.filter(|_| sse).map(|why| {
        let event = serde_json::json!({"error": {
            "object": "error", "type": "worker_failed", "code": 502,
            "message": format!("the worker failed mid-answer; not migrated: {why}"),
        }});
        Bytes::from(format!("data: {event}\n\n"))
    });
    let body = Body::from_stream(Guarded {
        inner: Box::pin(resp.bytes_stream()),
        guard,
        cut_event,
        failed: false,
    });
    with_body(builder, body, false)
}

/// The status and headers of the worker's response as ours (counted).
pub(super) fn head(
    resp: &reqwest::Response,
    worker_id: &str,
    strip: Option<&str>,
) -> axum::http::response::Builder {
    metrics::counter!("prefix_router_upstream_responses_total", "status" => resp.status().as_u16().to_string()).increment(1);
    let mut builder = Response::builder().status(resp.status());
    if let Some(headers) = builder.headers_mut() {
        for (name, value) in resp.headers() {
            if forwardable(name) && Some(name.as_str()) != strip {
                headers.append(name, value.clone());
            }
        }
        if let Ok(v) = HeaderValue::from_str(worker_id) {
            headers.insert(WORKER_HEADER, v);
        }
    }
    builder
}

/// `builder`'s response with `body`; a body the router rewrites
/// (`rewritten`) has no content length of the worker's.
pub(super) fn with_body(
    mut builder: axum::http::response::Builder,
    body: Body,
    rewritten: bool,
) -> Response {
    if rewritten && let Some(headers) = builder.headers_mut() {
        headers.remove(header::CONTENT_LENGTH);
    }
    builder
        .body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// A body stream that holds the in-flight guard until it is dropped:
/// at its end, on an upstream error, or when the client disconnects. Its
/// first bytes end the request's prefill.
struct Guarded<S> {
    inner: Pin<Box<S>>,
    guard: InFlightGuard,
    /// Sent before the error when the stream breaks.
    cut_event: Option<Bytes>,
    /// The stream broke and the event went out: it ends there.
    failed: bool,
}

impl<S: Stream<Item = Result<Bytes, reqwest::Error>>> Stream for Guarded<S> {
    type Item = Result<Bytes, reqwest::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let next = match self.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Err(e))) => match self.cut_event.take() {
                Some(event) => {
                    tracing::debug!(error = %e, "stream broke; error event sent");
                    self.failed = true;
                    return Poll::Ready(Some(Ok(event)));
                }
                None => Poll::Ready(Some(Err(e))),
            },
            other => other,
        };
        if let Poll::Ready(Some(Ok(bytes))) = &next
            && !bytes.is_empty()
        {
            self.guard.first_byte();
        }
        next
    }
}

/// Longest JSON answer [`relay_whole`] holds before answering; a longer
/// one is streamed on as it comes.
const MAX_HELD_JSON: usize = 8 << 20;

/// As [`relay_noting`], for a JSON answer (a non-streamed one): the body is
/// read whole before the client gets the headers, so a worker that fails
/// while sending it gives the client a 502 JSON error saying so and
/// `unmoved`, not a cut body. Past [`MAX_HELD_JSON`] the rest streams
/// on as it comes.
pub(super) async fn relay_whole(
    resp: reqwest::Response,
    worker_id: &str,
    mut guard: InFlightGuard,
    strip: Option<&str>,
    unmoved: &str,
) -> Response {
    let builder = head(&resp, worker_id, strip);
    let mut inner = Box::pin(resp.bytes_stream());
    let mut held = bytes::BytesMut::new();
    loop {
        match futures_util::StreamExt::next(&mut inner).await {
            Some(Ok(b)) => {
                if !b.is_empty() {
                    guard.first_byte();
                }
                held.extend_from_slice(&b);
                if held.len() > MAX_HELD_JSON {
                    let first = futures_util::stream::once(std::future::ready(Ok(held.freeze())));
                    let body = Body::from_stream(Guarded {
                        inner: Box::pin(futures_util::StreamExt::chain(first, inner)),
                        guard,
                        cut_event: None,
                        failed: false,
                    });
                    return with_body(builder, body, false);
                }
            }
            Some(Err(e)) => {
                drop(guard);
                tracing::warn!(worker = worker_id, error = %e, "a worker failed while sending its answer");
                let error = serde_json::json!({"error": {
                    "object": "error", "type": "worker_failed", "code": 502,
                    "message": format!("the worker failed mid-answer ({e}); not migrated: {unmoved}"),
                }});
                let mut builder = builder.status(axum::http::StatusCode::BAD_GATEWAY);
                if let Some(h) = builder.headers_mut() {
                    h.remove(header::CONTENT_LENGTH);
                    h.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
                return with_body(builder, Body::from(error.to_string()), false);
            }
            None => {
                drop(guard);
                return with_body(builder, Body::from(held.freeze()), false);
            }
        }
    }
}

/// Whether `resp` is a JSON answer (what [`relay_whole`] takes): its
/// content type says so, or it has none (a body cut before it was typed).
pub(super) fn is_json(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|v| v.as_bytes().starts_with(b"application/json"))
}
