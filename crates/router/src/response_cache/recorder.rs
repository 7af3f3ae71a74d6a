//! [`Recording`]: a response body passed to the client unchanged while its
//! chunks are kept; when it ends normally, the whole response goes to the
//! cache. A body that fails, or that the client stops reading, is not
//! stored; one over the entry cap stops being kept at once.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;

use super::entry::CachedResponse;
use super::key::RequestKey;
use super::{Inner, count};

/// What is kept of a response on its way to the client.
pub(super) struct Pending {
    pub(super) cache: Arc<Inner>,
    pub(super) key: RequestKey,
    pub(super) status: u16,
    pub(super) content_type: String,
    pub(super) chunks: Vec<Bytes>,
    pub(super) size: usize,
    /// Set once the body passed the entry cap (its chunks are dropped).
    pub(super) too_large: bool,
    /// The body's `Content-Length`, when the worker gave one: the server
    /// stops reading a body once it has that many bytes, so that is its end.
    pub(super) length: Option<usize>,
}

impl Pending {
    fn add(&mut self, chunk: &Bytes) {
        if self.too_large {
            return;
        }
        self.size = self.size.saturating_add(chunk.len());
        if self.size > self.cache.settings.max_entry_bytes {
            self.too_large = true;
            self.chunks = Vec::new();
            return;
        }
        // A Bytes clone shares the buffer the client is sent.
        self.chunks.push(chunk.clone());
    }

    /// True once the body has all the bytes its `Content-Length` says.
    fn complete(&self) -> bool {
        self.length == Some(self.size)
    }

    /// The body ended normally: store it, if it fits.
    fn finish(self) {
        if self.too_large {
            count("too_large");
            return;
        }
        let entry = CachedResponse {
            status: self.status,
            content_type: self.content_type,
            chunks: self.chunks,
        }
        .encode();
        if entry.len() > self.cache.settings.max_entry_bytes {
            count("too_large");
            return;
        }
        Inner::spawn_store(&self.cache, self.key, entry);
    }
}

/// A body stream that records what passes through it.
pub(super) struct Recording<S> {
    inner: Pin<Box<S>>,
    pending: Option<Pending>,
}

impl<S> Recording<S> {
    pub(super) fn new(inner: S, pending: Pending) -> Self {
        Recording {
            inner: Box::pin(inner),
            pending: Some(pending),
        }
    }
}

impl<S, E> Stream for Recording<S>
where
    S: Stream<Item = Result<Bytes, E>>,
{
    type Item = Result<Bytes, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(p) = self.pending.as_mut() {
                    p.add(chunk);
                    if p.complete()
                        && let Some(p) = self.pending.take()
                    {
                        p.finish();
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if self.pending.take().is_some() {
                    count("not_stored");
                }
            }
            Poll::Ready(None) => {
                if let Some(p) = self.pending.take() {
                    p.finish();
                }
            }
            Poll::Pending => {}
        }
        polled
    }
}

impl<S> Drop for Recording<S> {
    fn drop(&mut self) {
        // Dropped before its end: the client went away mid-response.
        if self.pending.take().is_some() {
            count("not_stored");
        }
    }
}
