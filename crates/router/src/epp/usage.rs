//! The engine's own count of a response's prompt and cached tokens, read
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

/// Tokens of the prompt, and of those the engine found in its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
}

#[derive(Deserialize)]
struct Answer {
    usage: Option<UsageField>,
}

#[derive(Deserialize)]
struct UsageField {
    prompt_tokens: u64,
    prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
}

impl UsageTail {
    /// Keeps the last [`TAIL`] bytes of the body seen so far.
    pub fn feed(&mut self, chunk: &[u8]) {
        if chunk.len() >= TAIL {
            self.tail.clear();
            self.tail.extend_from_slice(&chunk[chunk.len() - TAIL..]);
            return;
        }
        let overflow = (self.tail.len() + chunk.len()).saturating_sub(TAIL);
        self.tail.drain(..overflow);
        self.tail.extend_from_slice(chunk);
    }

    /// The usage the body ends with, if any.
    pub fn usage(&self) -> Option<Usage> {
        if let Ok(answer) = serde_json::from_slice::<Answer>(&self.tail) {
            return answer.usage.map(Usage::from);
        }
        let text = String::from_utf8_lossy(&self.tail);
        text.lines()
            .rev()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Answer>(data.trim()).ok())
            .find_map(|answer| answer.usage)
            .map(Usage::from)
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
                cached_tokens: 32
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
                cached_tokens: 0
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
    fn keeps_only_the_tail() {
        let mut tail = UsageTail::default();
        tail.feed(&vec![b'x'; TAIL + 10]);
        tail.feed(br#"{"usage":{"prompt_tokens":1}}"#);
        assert_eq!(tail.tail.len(), TAIL);
    }
}
