//! Server-sent events out of a worker's byte stream: [`Events`] buffers
//! the bytes and hands out each complete event's `data`, however the
//! bytes were split into chunks.

use bytes::{Bytes, BytesMut};

/// Longest event held while waiting for its end: a worker that sends more
/// without an event boundary has failed (memory stays bounded).
pub(super) const MAX_EVENT_BYTES: usize = 16 << 20;

/// The bytes of a stream not yet split into events.
#[derive(Default)]
pub(super) struct Events {
    buf: BytesMut,
}

/// A stream whose next event is too long.
#[derive(Debug)]
pub(super) struct Oversized;

impl Events {
    /// Appends a chunk of the stream.
    pub(super) fn push(&mut self, bytes: &[u8]) -> Result<(), Oversized> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() > MAX_EVENT_BYTES && boundary(&self.buf).is_none() {
            return Err(Oversized);
        }
        Ok(())
    }

    /// The next complete event, as sent (its separator included), and its
    /// `data` (its `data:` lines joined by newlines), if one is complete;
    /// events without data are skipped.
    pub(super) fn next_data(&mut self) -> Option<(Bytes, Bytes)> {
        loop {
            let (end, sep) = boundary(&self.buf)?;
            let raw = self.buf.split_to(end + sep).freeze();
            let event = &raw[..end];
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
        self.buf.clear();
    }
}

/// Where the first event ends, and the length of its separator.
fn boundary(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_whole_however_the_bytes_are_split() {
        let stream = b"data: {\"a\":1}\n\n: ping\n\ndata: a\ndata:b\n\ndata: [DONE]\r\n\r\n";
        for cut in 0..stream.len() {
            let mut e = Events::default();
            let mut out = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                e.push(part).unwrap();
                while let Some((_, d)) = e.next_data() {
                    out.push(d.to_vec());
                }
            }
            assert_eq!(
                out,
                vec![b"{\"a\":1}".to_vec(), b"a\nb".to_vec(), b"[DONE]".to_vec()],
                "cut at {cut}"
            );
        }
    }
}
