//! Slow and idle clients, and too many of them: a deadline on each
//! request's head and on each idle keep-alive wait, enforced at the socket,
//! and a cap on open connections per listener (shared by the serving
//! threads that accept on it).
//!
//! Past the cap, a new connection gets a 503 JSON answer and is closed at
//! once, so that the process keeps file descriptors for its workers and its
//! other clients; each connection that waits idle between requests longer
//! than the idle timeout is closed (hyper sees its read fail).
//!
//! `axum::serve` runs hyper without a timer, so hyper's own
//! `header_read_timeout` never fires, and the builder is not reachable
//! through axum's API. Instead, [`GuardedListener`] wraps every accepted
//! socket in a [`GuardedIo`] whose reads fail once a deadline has passed
//! while it is armed, which makes hyper drop the connection. The deadline
//! is armed when the connection is accepted and when the first byte of a
//! later request arrives, and disarmed by [`mark_serving`] (a middleware)
//! as soon as hyper has parsed a head and handed the request over. So a
//! client must send each request head within the timeout; a connection
//! that waits idle between requests, or a long (streamed) response, is not
//! cut unless it stays idle past the idle timeout. The body has its own deadline, taken by the body extractors
//! ([`super::json`]), which answer 408.
//!
//! The IO layer cannot tell a pipelined next request from the current one,
//! so it only arms while no request of the connection is being handled:
//! a head that trickles in behind a request still in progress is bounded
//! only once that request is done.
//!
//! This follows HTTP/1.1, the only protocol the router serves (axum's
//! `http2` feature is off, so hyper-util's connection builder speaks
//! HTTP/1 alone). With a direct `hyper-util` dependency, the head deadline
//! could instead be hyper's own `header_read_timeout` on a builder with a
//! timer; the body deadline would stay in the extractors.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// What a listener allows its clients.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Deadline of each request head (from the connection or the request's
    /// first byte).
    pub head_timeout: Duration,
    /// Longest wait for the next request on a kept-alive connection.
    pub idle_timeout: Duration,
    /// Most connections open at once; more are refused with a 503.
    pub max_connections: usize,
}

/// A TCP listener whose connections must send each request head within the
/// head timeout and may idle at most the idle timeout between requests, at
/// most `max_connections` at once; TCP_NODELAY is set on each.
pub struct GuardedListener {
    inner: TcpListener,
    limits: ConnLimits,
    open: Arc<AtomicUsize>,
}

impl GuardedListener {
    /// Wraps `inner`.
    pub fn new(inner: TcpListener, limits: ConnLimits) -> Self {
        GuardedListener {
            inner,
            limits,
            open: Arc::default(),
        }
    }

    /// Counts its connections in `open`, with the other listeners that
    /// accept on the same socket (one per serving thread): the cap is the
    /// socket's.
    pub fn counting_in(mut self, open: Arc<AtomicUsize>) -> Self {
        self.open = open;
        self
    }
}

/// What a connection past the cap is told before it is closed.
fn refusal() -> String {
    let body = r#"{"error":{"message":"too many open connections to this router; retry later","type":"too_many_connections","code":503}}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

impl Listener for GuardedListener {
    type Io = GuardedIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedIo, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((tcp, addr)) => {
                    if self.open.load(Ordering::Acquire) >= self.limits.max_connections {
                        refuse(tcp);
                        continue;
                    }
                    let thread = state::serving_thread().to_string();
                    metrics::counter!("prefix_router_accepted_connections_total", "thread" => thread)
                        .increment(1);
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(error = %e, "TCP_NODELAY not set");
                    }
                    return (GuardedIo::new(tcp, self.limits, self.open.clone()), addr);
                }
                Err(e) => accept_error(e).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Answers 503 without reading the request and closes; best effort, never
/// waiting (a client that does not read its answer just sees the close).
fn refuse(tcp: TcpStream) {
    metrics::counter!("prefix_router_refused_connections_total").increment(1);
    let _ = tcp.try_write(refusal().as_bytes());
    if let Ok(std) = tcp.into_std() {
        let _ = std.shutdown(std::net::Shutdown::Both);
    }
}

/// As axum's own listener: errors of one connection are skipped; others
/// (out of file descriptors) are logged and retried after a pause rather
/// than spinning.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// What the socket and the request path of one connection share.
#[derive(Debug, Default)]
struct Shared {
    /// Requests of this connection being handled now.
    in_flight: AtomicUsize,
    /// Set while a head is awaited under the deadline.
    armed: AtomicBool,
    /// Set when the last request in flight ended: the socket arms the idle
    /// deadline at its next read.
    idle_from_next_read: AtomicBool,
    /// The task waiting on the socket, woken when the connection goes idle
    /// (its pending read would otherwise not notice until bytes arrive).
    reader: std::sync::Mutex<Option<std::task::Waker>>,
}

/// The handle [`mark_serving`] gets (as axum connect info) on the
/// connection of each request.
#[derive(Debug, Clone)]
pub struct ConnGuard(Arc<Shared>);

impl Connected<IncomingStream<'_, GuardedListener>> for ConnGuard {
    fn connect_info(stream: IncomingStream<'_, GuardedListener>) -> Self {
        ConnGuard(stream.io().shared.clone())
    }
}

/// Counts the request as handled on its connection, which disarms the
/// head and idle deadlines, until its response body has been sent (or
/// dropped): a long streamed answer is never cut as idle.
pub async fn mark_serving(req: Request, next: Next) -> Response {
    let guard = req
        .extensions()
        .get::<ConnectInfo<ConnGuard>>()
        .map(|ConnectInfo(g)| Serving::enter(g.0.clone()));
    let response = next.run(req).await;
    match guard {
        Some(guard) => response.map(|inner| {
            Body::new(ServedBody {
                inner,
                _guard: guard,
            })
        }),
        None => response,
    }
}

/// A response body that keeps its request counted until it is done.
struct ServedBody {
    inner: Body,
    _guard: Serving,
}

impl http_body::Body for ServedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

struct Serving(Arc<Shared>);

impl Serving {
    fn enter(shared: Arc<Shared>) -> Self {
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        shared.armed.store(false, Ordering::Release);
        Serving(shared)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle_from_next_read.store(true, Ordering::Release);
            let reader = self
                .0
                .reader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(w) = reader {
                w.wake();
            }
        }
    }
}

/// An accepted socket with the deadlines of its connection; counted among
/// its listener's open connections until dropped.
pub struct GuardedIo {
    tcp: TcpStream,
    shared: Arc<Shared>,
    limits: ConnLimits,
    deadline: Pin<Box<Sleep>>,
    /// True while the armed deadline is the idle one (not a head's).
    idle: bool,
    open: Arc<AtomicUsize>,
}

impl GuardedIo {
    fn new(tcp: TcpStream, limits: ConnLimits, open: Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::AcqRel);
        let shared = Arc::new(Shared::default());
        shared.armed.store(true, Ordering::Release);
        GuardedIo {
            tcp,
            shared,
            limits,
            deadline: Box::pin(tokio::time::sleep(limits.head_timeout)),
            idle: false,
            open,
        }
    }
}

impl Drop for GuardedIo {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this
            .shared
            .idle_from_next_read
            .swap(false, Ordering::AcqRel)
            && this.shared.in_flight.load(Ordering::Acquire) == 0
            && !this.shared.armed.swap(true, Ordering::AcqRel)
        {
            // Waiting for the next request of a kept-alive connection.
            this.idle = true;
            let idle = this.limits.idle_timeout;
            this.deadline.as_mut().reset(Instant::now() + idle);
        }
        if this.shared.armed.load(Ordering::Acquire) && this.deadline.as_mut().poll(cx).is_ready() {
            let (phase, why) = if this.idle {
                ("idle", "connection idle longer than the idle timeout")
            } else {
                (
                    "head",
                    "request head not received within the client timeout",
                )
            };
            metrics::counter!("prefix_router_slow_clients_total", "phase" => phase).increment(1);
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if polled.is_pending() {
            *this
                .shared
                .reader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cx.waker().clone());
        }
        let got_bytes = matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        if got_bytes && this.shared.in_flight.load(Ordering::Acquire) == 0 {
            let was_armed = this.shared.armed.swap(true, Ordering::AcqRel);
            if !was_armed || this.idle {
                // The first byte of a new request: its head is due by then.
                this.idle = false;
                let head = this.limits.head_timeout;
                this.deadline.as_mut().reset(Instant::now() + head);
            }
        }
        polled
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
