//! [`CachedResponse`]: what an entry holds (status, content type, and the
//! body as the chunks the worker sent), its byte layout in Valkey, and its
//! replay as a response.
//!
//! Layout: `PRC1`, status (u16 BE), content type length (u16 BE) and
//! bytes, chunk count (u32 BE), then each chunk's length (u32 BE) and bytes.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use super::CACHE_HEADER;

const MAGIC: &[u8; 4] = b"PRC1";

/// A complete response, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedResponse {
    /// Its HTTP status.
    pub status: u16,
    /// Its `Content-Type` (empty when it had none).
    pub content_type: String,
    /// The body, chunk by chunk as received.
    pub chunks: Vec<Bytes>,
}

/// Why stored bytes are not an entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not this layout (another version, or not ours).
    #[error("not a cached response (unknown layout)")]
    Layout,
    /// Cut short or followed by extra bytes.
    #[error("a cached response of the wrong length")]
    Length,
}

impl CachedResponse {
    /// Bytes of the body.
    pub fn body_len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        let ct = self.content_type.as_bytes();
        let ct = &ct[..ct.len().min(usize::from(u16::MAX))];
        let mut out = Vec::with_capacity(16 + ct.len() + 4 * self.chunks.len() + self.body_len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&(ct.len() as u16).to_be_bytes());
        out.extend_from_slice(ct);
        out.extend_from_slice(&(self.chunks.len() as u32).to_be_bytes());
        for c in &self.chunks {
            out.extend_from_slice(&(c.len() as u32).to_be_bytes());
            out.extend_from_slice(c);
        }
        out
    }

    /// Reads the stored form; the chunks share `bytes`' buffer.
    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)?.as_ref() != MAGIC {
            return Err(DecodeError::Layout);
        }
        let status = r.u16()?;
        let ct_len = usize::from(r.u16()?);
        let content_type =
            String::from_utf8(r.take(ct_len)?.to_vec()).map_err(|_| DecodeError::Layout)?;
        let count = r.u32()?;
        let mut chunks = Vec::new();
        for _ in 0..count {
            let len = r.u32()?;
            chunks.push(r.take(len)?);
        }
        if r.at != r.bytes.len() {
            return Err(DecodeError::Length);
        }
        Ok(CachedResponse {
            status,
            content_type,
            chunks,
        })
    }

    /// The replay: same status, content type and bytes, chunk by chunk,
    /// marked as a cache hit.
    pub fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        let body = if self.chunks.len() == 1 {
            Body::from(self.chunks.into_iter().next().unwrap_or_default())
        } else {
            let chunks = self
                .chunks
                .into_iter()
                .map(Ok::<_, std::convert::Infallible>);
            Body::from_stream(futures_util::stream::iter(chunks))
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        let headers = resp.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&self.content_type)
            && !self.content_type.is_empty()
        {
            headers.insert(header::CONTENT_TYPE, v);
        }
        headers.insert(CACHE_HEADER, HeaderValue::from_static("hit"));
        resp
    }
}

struct Reader {
    bytes: Bytes,
    at: usize,
}

impl Reader {
    fn take(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        let end = self.at.checked_add(n).ok_or(DecodeError::Length)?;
        if end > self.bytes.len() {
            return Err(DecodeError::Length);
        }
        let out = self.bytes.slice(self.at..end);
        self.at = end;
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<usize, DecodeError> {
        let b = self.take(4)?;
        usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .map_err(|_| DecodeError::Length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CachedResponse {
        CachedResponse {
            status: 200,
            content_type: "text/event-stream".into(),
            chunks: vec![
                Bytes::from_static(b"data: {\"a\":1}\n\n"),
                Bytes::new(),
                Bytes::from_static(b"data: [DONE]\n\n"),
            ],
        }
    }

    #[test]
    fn entries_round_trip() {
        let e = sample();
        let bytes = Bytes::from(e.encode());
        assert_eq!(CachedResponse::decode(bytes).unwrap(), e);
        let empty = CachedResponse {
            status: 200,
            content_type: String::new(),
            chunks: Vec::new(),
        };
        assert_eq!(
            CachedResponse::decode(Bytes::from(empty.encode())).unwrap(),
            empty
        );
    }

    #[test]
    fn damaged_entries_are_refused() {
        let bytes = sample().encode();
        for cut in [0, 3, 8, bytes.len() - 1] {
            assert!(
                CachedResponse::decode(Bytes::copy_from_slice(&bytes[..cut])).is_err(),
                "{cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            CachedResponse::decode(Bytes::from(longer)),
            Err(DecodeError::Length)
        );
        let mut other = bytes;
        other[3] = b'9';
        assert_eq!(
            CachedResponse::decode(Bytes::from(other)),
            Err(DecodeError::Layout)
        );
    }
}
