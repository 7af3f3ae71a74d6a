//! The engine's own count of a response's prompt, cached and generated tokens, read
//! from the end of its body: the `usage` of a JSON answer, or of the last
//! server-sent event that carries one (streams with `include_usage`).

use serde::Deserialize;

/// Bytes of a response body kept to find its usage: a JSON answer's usage
/// is at its end, a stream's in its last events.
const TAIL: usize = 64 * 1024;

/// The end of a response body, as it streams by.
#[derive(Default)]
pub struct UsageTail {
    tail: Vec<u8>,
}

/// Tokens of the prompt, of those the engine found in its cache, and of
/// the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Deserialize)]
struct Answer {
    usage: Option<UsageField>,
}

#[derive(Deserialize)]
struct UsageField {
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
}

impl UsageTail {
    /// Keeps at least the last [`TAIL`] bytes of the body seen so far
    /// (at most twice that: the buffer is cut back only when it doubles, so
    /// a long stream costs O(its bytes), not O(chunks × TAIL)).
    pub fn feed(&mut self, chunk: &[u8]) {
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > 2 * TAIL {
            let cut = self.tail.len() - TAIL;
            self.tail.drain(..cut);
        }
    }

    /// The usage the body ends with, if any: a whole JSON answer's, else
    /// the last `"usage":` object in the tail (a long JSON answer, or a
    /// stream's last events).
    pub fn usage(&self) -> Option<Usage> {
        if let Ok(answer) = serde_json::from_slice::<Answer>(&self.tail) {
            return answer.usage.map(Usage::from);
        }
        let key = b"\"usage\"";
        let mut end = self.tail.len();
        while let Some(at) = self.tail[..end].windows(key.len()).rposition(|w| w == key) {
            end = at;
            let rest = &self.tail[at + key.len()..];
            let Some(colon) = rest.iter().position(|b| !b.is_ascii_whitespace()) else {
                continue;
            };
            if rest[colon] != b':' {
                continue;
            }
            let value = &rest[colon + 1..];
            let mut values =
                serde_json::Deserializer::from_slice(value).into_iter::<Option<UsageField>>();
            if let Some(Ok(Some(usage))) = values.next() {
                return Some(Usage::from(usage));
            }
        }
        None
    }
}

impl From<UsageField> for Usage {
    fn from(u: UsageField) -> Self {
        Usage {
            prompt_tokens: u.prompt_tokens,
            cached_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            completion_tokens: u.completion_tokens.unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_of(chunks: &[&str]) -> Option<Usage> {
        let mut tail = UsageTail::default();
        for c in chunks {
            tail.feed(c.as_bytes());
        }
        tail.usage()
    }

    #[test]
    fn json_answer() {
        let body = r#"{"id":"x","choices":[{"text":"hi"}],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}}"#;
        let (a, b) = body.split_at(17);
        assert_eq!(
            usage_of(&[a, b]),
            Some(Usage {
                prompt_tokens: 40,
                cached_tokens: 32,
                completion_tokens: 2
            })
        );
    }

    #[test]
    fn stream_with_usage_in_the_last_event() {
        let events = [
            "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"prompt_tokens_details\":null}}\n\n",
            "data: [DONE]\n\n",
        ];
        assert_eq!(
            usage_of(&events),
            Some(Usage {
                prompt_tokens: 7,
                cached_tokens: 0,
                completion_tokens: 0
            })
        );
    }

    #[test]
    fn no_usage() {
        assert_eq!(
            usage_of(&["data: {\"choices\":[]}\n\n", "data: [DONE]\n\n"]),
            None
        );
        assert_eq!(usage_of(&["<html>oops</html>"]), None);
    }

    #[test]
    fn keeps_a_bounded_tail() {
        let mut tail = UsageTail::default();
        for _ in 0..100 {
            tail.feed(&vec![b'x'; TAIL / 3]);
            assert!(tail.tail.len() <= 2 * TAIL);
        }
        tail.feed(br#"{"usage":{"prompt_tokens":1}}"#);
        assert!(tail.tail.len() >= TAIL);
        assert_eq!(tail.usage().map(|u| u.prompt_tokens), Some(1));
    }

    #[test]
    fn a_long_json_answer() {
        let text = "word ".repeat(40_000);
        let body = format!(
            r#"{{"choices":[{{"text":"{text}"}}],"usage":{{"prompt_tokens":9,"prompt_tokens_details":{{"cached_tokens":8}}}}}}"#
        );
        let mut tail = UsageTail::default();
        for chunk in body.as_bytes().chunks(1000) {
            tail.feed(chunk);
        }
        assert_eq!(
            tail.usage(),
            Some(Usage {
                prompt_tokens: 9,
                cached_tokens: 8,
                completion_tokens: 0
            })
        );
    }
}
