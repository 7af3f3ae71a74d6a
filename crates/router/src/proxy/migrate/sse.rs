//! Server-sent events out of a worker's byte stream: [`Events`] buffers
//! the bytes and hands out each complete event's `data`, however the
//! bytes were split into chunks; and the events the relay writes
//! ([`sse`], [`write_sse`], [`write_event`]) and their data ([`event_data`]).

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;

use super::ids::Ids;

/// Longest event held while waiting for its end: a worker that sends more
/// without an event boundary has failed (memory stays bounded).
pub(super) const MAX_EVENT_BYTES: usize = 16 << 20;

/// The bytes of a stream not yet split into events.
#[derive(Default)]
pub(super) struct Events {
    /// A read that came while nothing was held: its events are sliced out
    /// of it, not copied; what is left of it when a read follows moves to
    /// `buf`.
    fresh: Bytes,
    /// The bytes held across reads (an event not yet whole).
    buf: BytesMut,
    /// The bytes held before this hold no event boundary: a long event
    /// arriving in many reads is searched once, not once per read.
    searched: usize,
    /// The search passed a line break inside the first event held (else
    /// the event is one line, and its data is sliced out without a
    /// second pass).
    lines: bool,
}

/// A stream whose next event is too long.
#[derive(Debug)]
pub(super) struct Oversized;

impl Events {
    /// Appends a chunk of the stream.
    pub(super) fn push(&mut self, bytes: Bytes) -> Result<(), Oversized> {
        if self.buf.is_empty() && self.fresh.is_empty() {
            self.fresh = bytes;
        } else {
            if !self.fresh.is_empty() {
                self.buf.extend_from_slice(&std::mem::take(&mut self.fresh));
            }
            self.buf.extend_from_slice(&bytes);
        }
        if self.held().len() > MAX_EVENT_BYTES && self.boundary().is_none() {
            return Err(Oversized);
        }
        Ok(())
    }

    /// The bytes held.
    fn held(&self) -> &[u8] {
        if self.fresh.is_empty() {
            &self.buf
        } else {
            &self.fresh
        }
    }

    /// The first `len` bytes held, taken out.
    fn take(&mut self, len: usize) -> Bytes {
        if self.fresh.is_empty() {
            self.buf.split_to(len).freeze()
        } else {
            self.fresh.split_to(len)
        }
    }

    /// The next complete event, as sent (its separator included), and its
    /// `data` (its `data:` lines joined by newlines), if one is complete;
    /// events without data are skipped.
    pub(super) fn next_data(&mut self) -> Option<(Bytes, Bytes)> {
        loop {
            let (end, sep) = self.boundary()?;
            let raw = self.take(end + sep);
            self.searched = 0;
            let one_line = !std::mem::take(&mut self.lines);
            let event = &raw[..end];
            if one_line && let Some(rest) = event.strip_prefix(b"data:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
                let data = raw.slice_ref(rest);
                return Some((raw, data));
            }
            // One `data:` line (vLLM's events): its bytes, not a copy.
            let lines = event
                .split(|&b| b == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
            let mut data: Option<Vec<u8>> = None;
            let mut single: Option<&[u8]> = None;
            for line in lines {
                let Some(rest) = line.strip_prefix(b"data:") else {
                    continue;
                };
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                match (single, data.as_mut()) {
                    (None, None) => single = Some(rest),
                    (Some(first), None) => {
                        let mut d = first.to_vec();
                        d.push(b'\n');
                        d.extend_from_slice(rest);
                        data = Some(d);
                    }
                    (_, Some(d)) => {
                        d.push(b'\n');
                        d.extend_from_slice(rest);
                    }
                }
            }
            match (data, single) {
                (Some(d), _) => return Some((raw, Bytes::from(d))),
                (None, Some(one)) => {
                    let data = raw.slice_ref(one);
                    return Some((raw, data));
                }
                (None, None) => {}
            }
        }
    }

    /// Forgets what is buffered (the stream it came from is gone).
    pub(super) fn clear(&mut self) {
        self.fresh = Bytes::new();
        self.buf.clear();
        self.searched = 0;
        self.lines = false;
    }

    /// Where the first event held ends, and the length of its
    /// separator; searched from where the last search stopped.
    fn boundary(&mut self) -> Option<(usize, usize)> {
        let held = self.held();
        let len = held.len();
        let (found, lines) = boundary(held, self.searched);
        self.lines |= lines;
        if found.is_none() {
            // A separator may straddle the next read: its first bytes are
            // searched again.
            self.searched = len.saturating_sub(3);
        }
        found
    }
}

/// The first event boundary in `buf` with its `\n` at or after `from`: where
/// the event ends and the length of its separator (`\n\n` or `\r\n\r\n`);
/// and whether a line break was passed before it (one that the next
/// search, from three bytes before the end, will not look at again).
fn boundary(buf: &[u8], from: usize) -> (Option<(usize, usize)>, bool) {
    let mut lines = false;
    let mut at = from;
    loop {
        let Some(next) = buf
            .get(at..)
            .and_then(|r| r.iter().position(|&b| b == b'\n'))
        else {
            return (None, lines);
        };
        at += next;
        if buf.get(at + 1) == Some(&b'\n') {
            return (Some((at, 2)), lines);
        }
        if at > 0 && buf[at - 1] == b'\r' && buf.get(at + 1..at + 3) == Some(b"\r\n") {
            return (Some((at - 1, 4)), lines);
        }
        lines |= at + 3 < buf.len();
        at += 1;
    }
}

/// An event carrying `v`.
pub(super) fn sse(v: &Value) -> Bytes {
    let mut out = BytesMut::new();
    write_sse(v, &mut out);
    out.freeze()
}

/// Appends an event carrying `v` to `out`.
pub(super) fn write_sse(v: &Value, out: &mut BytesMut) {
    out.put_slice(b"data: ");
    // Writing a `Value` to memory cannot fail.
    let _ = serde_json::to_writer(out.writer(), v);
    out.put_slice(b"\n\n");
}

/// Appends the event of the chunk `json` without its id fields to `out`.
pub(super) fn write_event(ids: &Ids, json: &[u8], out: &mut impl BufMut) {
    out.put_slice(b"data: ");
    ids.write_without(json, out);
    out.put_slice(b"\n\n");
}

/// The data of an event as this module writes them (`data: …\n\n`).
pub(super) fn event_data(event: &[u8]) -> Option<&[u8]> {
    event.strip_prefix(b"data: ")?.strip_suffix(b"\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_whole_however_the_bytes_are_split() {
        let stream = b"data: {\"a\":1}\n\n: ping\n\ndata: a\ndata:b\n\ndata: c\r\ndata: d\r\n\r\ndata: e\r\n\ndata:\n\n: x\ndata: f\n\ndata: [DONE]\r\n\r\n";
        for cut in 0..stream.len() {
            let mut e = Events::default();
            let mut out = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                e.push(Bytes::copy_from_slice(part)).unwrap();
                while let Some((_, d)) = e.next_data() {
                    out.push(d.to_vec());
                }
            }
            assert_eq!(
                out,
                vec![
                    b"{\"a\":1}".to_vec(),
                    b"a\nb".to_vec(),
                    b"c\nd".to_vec(),
                    b"e".to_vec(),
                    b"".to_vec(),
                    b"f".to_vec(),
                    b"[DONE]".to_vec()
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_long_event_in_many_reads_is_whole_and_separators_straddling_reads_are_found() {
        for sep in [&b"\n\n"[..], b"\r\n\r\n"] {
            let mut event = b"data: ".to_vec();
            event.extend(std::iter::repeat_n(b'1', 100_000));
            event.extend_from_slice(sep);
            event.extend_from_slice(b"data: x\r\n\r\n");
            for step in [1, 2, 3, 7, 4096] {
                let mut e = Events::default();
                let mut out = Vec::new();
                for part in event.chunks(step) {
                    e.push(Bytes::copy_from_slice(part)).unwrap();
                    while let Some((raw, d)) = e.next_data() {
                        out.push((raw.len(), d.len()));
                    }
                }
                assert_eq!(out, vec![(100_006 + sep.len(), 100_000), (11, 1)], "{step}");
            }
        }
        // A CR alone is no separator; the LF pair after it is.
        let mut e = Events::default();
        e.push(Bytes::from_static(b"data: a\r\n\ndata: b\n\n"))
            .unwrap();
        assert_eq!(e.next_data().map(|(_, d)| d.to_vec()), Some(b"a".to_vec()));
        assert_eq!(e.next_data().map(|(_, d)| d.to_vec()), Some(b"b".to_vec()));
    }
}
