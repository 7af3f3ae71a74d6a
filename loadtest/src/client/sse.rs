//! Incremental reading of an OpenAI server-sent-event stream: `data:` lines
//! split across network chunks, the first content chunk (time to first
//! token), the answer text, and the final usage chunk.

use serde_json::Value;

/// What a stream has told so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StreamState {
    buf: Vec<u8>,
    /// Content chunks seen (one per token with vLLM and the sim).
    pub content_chunks: u64,
    /// The answer's text so far.
    pub text: String,
    /// `usage.prompt_tokens`, if a usage chunk came.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, if a usage chunk came.
    pub completion_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, if given.
    pub cached_tokens: Option<u64>,
    /// `data: [DONE]` arrived.
    pub done: bool,
    /// A chunk with a `finish_reason` arrived.
    pub finished: bool,
    /// An `error` object arrived in the stream.
    pub error: Option<String>,
}

impl StreamState {
    /// Feeds bytes; returns true if they completed at least one content chunk
    /// (non-empty `choices[0].text` or `choices[0].delta.content`).
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        self.buf.extend_from_slice(bytes);
        let mut content = false;
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(data) = line.strip_prefix("data:") {
                content |= self.event(data.trim_start());
            }
        }
        content
    }

    fn event(&mut self, data: &str) -> bool {
        if data == "[DONE]" {
            self.done = true;
            return false;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return false;
        };
        if let Some(e) = v.get("error") {
            self.error = Some(
                e.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("error in stream")
                    .to_owned(),
            );
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            self.prompt_tokens = u["prompt_tokens"].as_u64();
            self.completion_tokens = u["completion_tokens"].as_u64();
            self.cached_tokens = u["prompt_tokens_details"]["cached_tokens"].as_u64();
        }
        let choice = &v["choices"][0];
        if !choice["finish_reason"].is_null() {
            self.finished = true;
        }
        let piece = choice["text"]
            .as_str()
            .or_else(|| choice["delta"]["content"].as_str())
            .unwrap_or("");
        if piece.is_empty() {
            return false;
        }
        self.content_chunks += 1;
        self.text.push_str(piece);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_stream_in_pieces() {
        let mut s = StreamState::default();
        let a = b"data: {\"choices\":[{\"text\":\" tok\"}]}\n\ndata: {\"choi";
        assert!(s.feed(a));
        assert!(!s.feed(b"ces\":[{\"text\":\" tok\"}]}"));
        assert!(s.feed(b"\n\n"));
        let usage = br#"data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32}}}

data: [DONE]

"#;
        assert!(!s.feed(usage));
        assert_eq!(s.content_chunks, 2);
        assert_eq!(s.text, " tok tok");
        assert_eq!(
            (s.prompt_tokens, s.completion_tokens, s.cached_tokens),
            (Some(40), Some(2), Some(32))
        );
        assert!(s.done);
    }

    #[test]
    fn chat_role_chunk_is_not_content() {
        let mut s = StreamState::default();
        assert!(!s.feed(
            b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\n"
        ));
        assert!(
            s.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\" hi\"}}],\"usage\":null}\n\n")
        );
        assert_eq!(s.prompt_tokens, None);
        assert!(!s.feed(b"data: {\"error\":{\"message\":\"boom\"}}\n\n: comment\n\n"));
        assert_eq!(s.error.as_deref(), Some("boom"));
        assert!(!s.done);
    }
}
