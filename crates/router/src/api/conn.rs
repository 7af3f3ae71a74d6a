//! Slow clients (slowloris): a deadline on each request's head, enforced
//! at the socket.
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
//! cut. The body has its own deadline, taken by the body extractors
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

use axum::extract::Request;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// A TCP listener whose connections must send each request head within
/// `timeout`; TCP_NODELAY is set on each.
pub struct GuardedListener {
    inner: TcpListener,
    timeout: Duration,
}

impl GuardedListener {
    /// Wraps `inner`.
    pub fn new(inner: TcpListener, timeout: Duration) -> Self {
        GuardedListener { inner, timeout }
    }
}

impl Listener for GuardedListener {
    type Io = GuardedIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedIo, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((tcp, addr)) => {
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(error = %e, "TCP_NODELAY not set");
                    }
                    return (GuardedIo::new(tcp, self.timeout), addr);
                }
                Err(e) => accept_error(e).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
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

/// Counts the request as handled on its connection, which disarms the head
/// deadline, until its handler has returned (or was dropped).
pub async fn mark_serving(req: Request, next: Next) -> Response {
    let guard = req
        .extensions()
        .get::<ConnectInfo<ConnGuard>>()
        .map(|ConnectInfo(g)| Serving::enter(g.0.clone()));
    let response = next.run(req).await;
    drop(guard);
    response
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
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An accepted socket with the head deadline of its connection.
pub struct GuardedIo {
    tcp: TcpStream,
    shared: Arc<Shared>,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl GuardedIo {
    fn new(tcp: TcpStream, timeout: Duration) -> Self {
        let shared = Arc::new(Shared::default());
        shared.armed.store(true, Ordering::Release);
        GuardedIo {
            tcp,
            shared,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.shared.armed.load(Ordering::Acquire) && this.deadline.as_mut().poll(cx).is_ready() {
            metrics::counter!("prefix_router_slow_clients_total", "phase" => "head").increment(1);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request head not received within the client timeout",
            )));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        let got_bytes = matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        if got_bytes
            && this.shared.in_flight.load(Ordering::Acquire) == 0
            && !this.shared.armed.swap(true, Ordering::AcqRel)
        {
            // The first byte of a new request: its head is due by then.
            this.deadline.as_mut().reset(Instant::now() + this.timeout);
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
