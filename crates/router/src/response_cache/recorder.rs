//! [`Recording`]: a response body passed to the client unchanged while its
//! chunks are kept; when it ends normally, the whole response goes to the
//! cache. A body that fails, or that the client stops reading, is not
//! stored; one over the entry cap stops being kept at once.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::Stream;
use serde_json::Value;

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
    /// Set once the body passed the entry cap, or the recordings' budget
    /// was spent (its chunks are dropped).
    pub(super) too_large: bool,
    /// Bytes counted in the cache's `recording` budget for this response.
    pub(super) held: usize,
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
        let budget = usize::try_from(self.cache.settings.max_bytes).unwrap_or(usize::MAX);
        let before = self
            .cache
            .recording
            .fetch_add(chunk.len(), Ordering::Relaxed);
        self.held += chunk.len();
        if self.size > self.cache.settings.max_entry_bytes || before + chunk.len() > budget {
            self.too_large = true;
            self.chunks = Vec::new();
            self.release();
            return;
        }
        // A Bytes clone shares the buffer the client is sent.
        self.chunks.push(chunk.clone());
    }

    /// Gives back this response's share of the recordings' budget.
    fn release(&mut self) {
        self.cache
            .recording
            .fetch_sub(std::mem::take(&mut self.held), Ordering::Relaxed);
    }

    /// True once the body has all the bytes its `Content-Length` says.
    fn complete(&self) -> bool {
        self.length == Some(self.size)
    }

    /// The body ended normally: store it, if it fits and is a whole
    /// answer (not an error or an aborted request the engine reported
    /// inside a 200).
    fn finish(mut self) {
        if self.too_large {
            count("too_large");
            return;
        }
        let chunks = std::mem::take(&mut self.chunks);
        if !answered_cleanly(&self.content_type, &chunks) {
            count("not_stored");
            return;
        }
        let entry = CachedResponse {
            status: self.status,
            content_type: std::mem::take(&mut self.content_type),
            chunks,
        }
        .encode();
        if entry.len() > self.cache.settings.max_entry_bytes {
            count("too_large");
            return;
        }
        Inner::spawn_store(&self.cache, self.key.clone(), entry);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.release();
    }
}

/// Whether a 200's body is a whole answer worth replaying: a stream that
/// reached `data: [DONE]` without an error event, or a JSON answer
/// without an error; neither with a choice the engine aborted
/// (`finish_reason` `abort`, or none in a JSON answer).
fn answered_cleanly(content_type: &str, chunks: &[Bytes]) -> bool {
    let body: Vec<u8> = chunks.concat();
    if content_type.starts_with("text/event-stream") {
        let text = String::from_utf8_lossy(&body);
        let mut done = false;
        for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
            let data = data.trim();
            if data == "[DONE]" {
                done = true;
                continue;
            }
            match serde_json::from_str::<Value>(data) {
                Ok(event) if event.get("error").is_none() && !aborted(&event, false) => {}
                _ => return false,
            }
        }
        return done;
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(answer) => answer.get("error").is_none() && !aborted(&answer, true),
        Err(_) => false,
    }
}

/// A choice ended by an abort (or, when `ended`, without a finish reason).
fn aborted(answer: &Value, ended: bool) -> bool {
    let Some(choices) = answer.get("choices").and_then(Value::as_array) else {
        return ended;
    };
    choices.iter().any(|c| match c.get("finish_reason") {
        Some(Value::String(r)) => r == "abort",
        None | Some(Value::Null) => ended,
        Some(_) => false,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(content_type: &str, body: &str) -> bool {
        let chunks: Vec<Bytes> = body
            .as_bytes()
            .chunks(7)
            .map(Bytes::copy_from_slice)
            .collect();
        answered_cleanly(content_type, &chunks)
    }

    #[test]
    fn only_whole_answers_are_replayed() {
        let sse = "text/event-stream";
        let ok = "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\ndata: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
        assert!(clean(sse, ok));
        assert!(
            !clean(sse, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"),
            "no [DONE]"
        );
        assert!(!clean(
            sse,
            "data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n"
        ));
        assert!(!clean(
            sse,
            "data: {\"choices\":[{\"finish_reason\":\"abort\"}]}\n\ndata: [DONE]\n\n"
        ));
        let json = "application/json";
        assert!(clean(
            json,
            r#"{"choices":[{"text":"hi","finish_reason":"stop"}]}"#
        ));
        assert!(!clean(
            json,
            r#"{"choices":[{"text":"hi","finish_reason":"abort"}]}"#
        ));
        assert!(!clean(
            json,
            r#"{"choices":[{"text":"hi","finish_reason":null}]}"#
        ));
        assert!(!clean(json, r#"{"error":{"message":"no"}}"#));
        assert!(!clean(json, "{\"choices\":[{\"text\":\"cut"));
    }
}
