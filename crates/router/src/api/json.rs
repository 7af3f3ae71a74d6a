//! Request bodies from outside: [`JsonBody`] (the push API) and
//! [`RawBody`] (the OpenAI routes, forwarded as sent). Every rejection is a
//! JSON 4xx: a body over the size limit (413), one that arrives too slowly
//! (408), one nested too deep (400), malformed or mistyped JSON (400).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::ApiError;

/// Deepest nesting of arrays and objects accepted in a JSON body. Real
/// requests stay far below it (a chat request with tool schemas nests a
/// dozen levels); serde_json stops at 128 on its own, with a message that
/// does not say what to fix, and the chat renderer parses the body again.
pub const MAX_JSON_DEPTH: usize = 64;

/// How long a client may take to send a request body (`--client-timeout`),
/// put in the request extensions by [`super::router`]; without it, bodies
/// are read without a deadline.
#[derive(Debug, Clone, Copy)]
pub struct ClientTimeout(pub Duration);

/// Like `axum::Json`, but errors (too large, too slow, too deep, malformed,
/// wrong types) are [`ApiError`]s, and any content type is accepted, as
/// workers' HTTP clients vary.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        check_depth(&bytes, MAX_JSON_DEPTH)?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

/// The raw body of an OpenAI request, read within the size limit and the
/// client timeout, and checked for nesting depth (it is parsed as JSON
/// later, by the routing path).
pub struct RawBody(pub Bytes);

impl<S> FromRequest<S> for RawBody
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        check_depth(&bytes, MAX_JSON_DEPTH)?;
        Ok(RawBody(bytes))
    }
}

/// The whole body, within the body limit (413) and the client timeout
/// (408, and the connection is closed, see [`ApiError`]).
async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    let timeout = req.extensions().get::<ClientTimeout>().map(|t| t.0);
    let read = Bytes::from_request(req, state);
    let result = match timeout {
        Some(t) => tokio::time::timeout(t, read).await.map_err(|_| {
            metrics::counter!("prefix_router_slow_clients_total", "phase" => "body").increment(1);
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the request body did not arrive within {}s",
                    t.as_secs_f64()
                ),
            )
        })?,
        None => read.await,
    };
    result.map_err(|rej| {
        let status = rej.status();
        let kind = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "body_too_large"
        } else {
            "invalid_body"
        };
        ApiError::new(status, kind, rej.body_text())
    })
}

/// Rejects JSON text whose arrays and objects nest deeper than `max`, in
/// one pass without recursion (so any input, even 16 MiB of `[`, costs a
/// linear scan and no stack). Brackets inside strings do not count. It
/// does not validate the JSON: the parser that runs next does.
pub fn check_depth(bytes: &[u8], max: usize) -> Result<(), ApiError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for chunk in bytes.chunks(8) {
        // A word none of whose bytes can change the state is skipped whole
        // (a long token-id prompt is almost all digits and commas); any
        // other is read byte by byte, never re-read.
        if !escaped
            && let Ok(word) = <[u8; 8]>::try_from(chunk)
            && quiet(u64::from_le_bytes(word), in_string)
        {
            continue;
        }
        for &b in chunk {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > max {
                        return Err(ApiError::bad_request(format!(
                            "invalid JSON body: nested deeper than {max} levels"
                        )));
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Whether none of the eight bytes of `word` matters to [`check_depth`]:
/// no quote or backslash in a string, no quote or bracket outside one.
fn quiet(word: u64, in_string: bool) -> bool {
    const LOW: u64 = 0x0101_0101_0101_0101;
    // Whether some byte of `word` equals `b` (exact: no false answers).
    let has = |word: u64, b: u8| {
        let v = word ^ (LOW * u64::from(b));
        v.wrapping_sub(LOW) & !v & (LOW << 7) != 0
    };
    if in_string {
        !has(word, b'"') && !has(word, b'\\')
    } else {
        // `[`/`{` and `]`/`}` differ only in bit 5.
        let folded = word | (LOW << 5);
        !has(word, b'"') && !has(folded, b'{') && !has(folded, b'}')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(check_depth(nested(64).as_bytes(), 64).is_ok());
        assert!(check_depth(nested(65).as_bytes(), 64).is_err());
        assert!(check_depth(nested(100_000).as_bytes(), 64).is_err());
        let mixed = format!("{}{}", "{\"a\":[".repeat(32), "]}".repeat(32));
        assert!(check_depth(mixed.as_bytes(), 64).is_ok());
        assert!(check_depth(mixed.as_bytes(), 63).is_err());
        // Brackets in strings, escaped quotes included, are text.
        let text = format!("{{\"p\": \"\\\"{}\"}}", "[".repeat(1000));
        assert!(check_depth(text.as_bytes(), 2).is_ok());
        // Unbalanced closers do not underflow.
        assert!(check_depth(b"]]]]{}", 1).is_ok());
        // Across the eight-byte steps: the same answers as byte by byte.
        let long = format!("{{\"prompt\": [{}]}}", "12345, 678, ".repeat(1000));
        assert!(check_depth(long.as_bytes(), 2).is_ok());
        assert!(check_depth(long.as_bytes(), 1).is_err());
        let err = check_depth(nested(65).as_bytes(), 64).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.message.contains("64"), "{}", err.message);
    }

    /// The plain byte-by-byte depth, to compare the word-skipping one with.
    fn depth_byte_by_byte(bytes: &[u8]) -> usize {
        let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
        for &b in bytes {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        deepest
    }

    #[test]
    fn skipping_words_changes_no_answer() {
        // Random texts over the bytes that matter and more that do not, so
        // that some words are skipped and some are not.
        let alphabet = b"[]{}\"\\a1, ;0123456789abcdefghijklmnop";
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for len in (0..400).step_by(7) {
            for _ in 0..20 {
                let text: Vec<u8> = (0..len)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        alphabet[(seed % alphabet.len() as u64) as usize]
                    })
                    .collect();
                let deepest = depth_byte_by_byte(&text);
                assert!(check_depth(&text, deepest).is_ok(), "{text:?}");
                if deepest > 0 {
                    assert!(check_depth(&text, deepest - 1).is_err(), "{text:?}");
                }
            }
        }
    }
}
