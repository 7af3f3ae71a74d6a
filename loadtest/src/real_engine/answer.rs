//! One streamed answer read whole, as the migration check compares it:
//! its events, the text and token ids of choice 0, the usage, and whether
//! it ended as an answer should (a `finish_reason`, then `[DONE]`).

use anyhow::{Context, bail};
use futures_util::StreamExt;
use serde_json::Value;

/// A streamed answer as its client saw it.
#[derive(Debug, Clone, Default)]
pub struct Streamed {
    /// The router's `x-prefix-router-worker` header, when it sent one.
    pub worker: Option<String>,
    /// Every event's JSON, in order (`[DONE]` is `done`).
    pub events: Vec<Value>,
    /// `data: [DONE]` arrived.
    pub done: bool,
}

impl Streamed {
    fn choices(&self) -> impl Iterator<Item = &Value> {
        self.events.iter().filter_map(|e| e.pointer("/choices/0"))
    }

    /// The text of choice 0 (completion `text` or chat `delta.content`).
    pub fn text(&self) -> String {
        self.choices()
            .filter_map(|c| {
                c.get("text")
                    .or_else(|| c.pointer("/delta/content"))
                    .and_then(Value::as_str)
            })
            .collect()
    }

    /// Every `token_ids` of choice 0, in order.
    pub fn ids(&self) -> Vec<u64> {
        self.choices()
            .filter_map(|c| c.get("token_ids").and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_u64)
            .collect()
    }

    /// Events carrying `token_ids` or `prompt_token_ids` anywhere.
    pub fn events_with_ids(&self) -> usize {
        self.events
            .iter()
            .filter(|e| {
                e.get("prompt_token_ids").is_some()
                    || e["choices"].as_array().is_some_and(|cs| {
                        cs.iter().any(|c| {
                            c.get("token_ids").is_some() || c.get("prompt_token_ids").is_some()
                        })
                    })
            })
            .count()
    }

    /// The last `finish_reason` of choice 0.
    pub fn finish_reason(&self) -> Option<String> {
        self.choices()
            .filter_map(|c| c["finish_reason"].as_str())
            .last()
            .map(str::to_owned)
    }

    /// `(prompt_tokens, completion_tokens)` of the last usage.
    pub fn usage(&self) -> Option<(u64, u64)> {
        let u = self
            .events
            .iter()
            .rev()
            .find_map(|e| e.get("usage").filter(|u| !u.is_null()))?;
        Some((
            u["prompt_tokens"].as_u64()?,
            u["completion_tokens"].as_u64()?,
        ))
    }

    /// The first error event's message.
    pub fn error(&self) -> Option<String> {
        self.events.iter().find_map(|e| {
            e.get("error").map(|err| {
                err["message"]
                    .as_str()
                    .map_or_else(|| err.to_string(), str::to_owned)
            })
        })
    }

    /// The distinct `(id, created, model)` envelopes of its chunks.
    pub fn envelopes(&self) -> usize {
        let mut seen: Vec<(&Value, &Value, &Value)> = Vec::new();
        for e in self.events.iter().filter(|e| e.get("choices").is_some()) {
            let env = (&e["id"], &e["created"], &e["model"]);
            if !seen.contains(&env) {
                seen.push(env);
            }
        }
        seen.len()
    }

    /// Events whose choice 0 carries text or ids (one per engine step).
    pub fn content_events(&self) -> usize {
        self.choices()
            .filter(|c| {
                c.get("token_ids")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty())
                    || c.get("text")
                        .or_else(|| c.pointer("/delta/content"))
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty())
            })
            .count()
    }

    /// Whole: a finish reason, `[DONE]`, no error event, one envelope.
    pub fn complete(&self) -> bool {
        self.done
            && self.finish_reason().is_some()
            && self.error().is_none()
            && self.envelopes() == 1
    }

    /// Splits `buf`'s complete lines off and keeps their events; true when
    /// a new content event arrived.
    fn feed(&mut self, buf: &mut Vec<u8>) -> bool {
        let before = self.content_events();
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim_start();
            if data == "[DONE]" {
                self.done = true;
            } else if let Ok(v) = serde_json::from_str::<Value>(data) {
                self.events.push(v);
            }
        }
        self.content_events() > before
    }
}

/// Posts `body` to `url` and reads the answer whole; after every content
/// event, `on_event` gets the count so far (the check kills an engine from
/// it). The stream may end in an error or a cut: that is in the result.
pub async fn stream(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
    mut on_event: impl FnMut(usize, Option<&str>),
) -> anyhow::Result<Streamed> {
    let resp = http
        .post(url)
        .json(body)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = resp.status();
    let worker = resp
        .headers()
        .get(protocol::headers::WORKER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        bail!("POST {url}: HTTP {status}: {text}");
    }
    let mut s = Streamed {
        worker,
        ..Streamed::default()
    };
    let mut bytes = resp.bytes_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = bytes.next().await {
        let Ok(chunk) = chunk else {
            // A cut: what arrived is the answer.
            break;
        };
        buf.extend_from_slice(&chunk);
        if s.feed(&mut buf) {
            on_event(s.content_events(), s.worker.as_deref());
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_read_across_network_chunks() {
        let mut s = Streamed::default();
        let mut buf = br#"data: {"id":"a","created":1,"model":"m","choices":[{"index":0,"text":"He","token_ids":[1,2]}]}"#.to_vec();
        assert!(!s.feed(&mut buf), "no newline yet");
        buf.extend_from_slice(b"\n\ndata: {\"id\":\"a\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"llo\",\"token_ids\":[3],\"finish_reason\":\"length\"}]}\n\n");
        assert!(s.feed(&mut buf));
        buf.extend_from_slice(b"data: {\"id\":\"a\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n");
        s.feed(&mut buf);
        assert_eq!(s.text(), "Hello");
        assert_eq!(s.ids(), vec![1, 2, 3]);
        assert_eq!(s.usage(), Some((5, 3)));
        assert_eq!(s.finish_reason().as_deref(), Some("length"));
        assert_eq!((s.content_events(), s.events_with_ids()), (2, 2));
        assert!(s.complete());
    }

    #[test]
    fn two_envelopes_or_no_done_is_not_whole() {
        let mut s = Streamed::default();
        let mut buf = b"data: {\"id\":\"a\",\"choices\":[{\"text\":\"x\"}]}\n\ndata: {\"id\":\"b\",\"choices\":[{\"text\":\"y\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n".to_vec();
        s.feed(&mut buf);
        assert_eq!(s.envelopes(), 2);
        assert!(!s.complete());
        let mut cut = Streamed::default();
        let mut buf =
            b"data: {\"id\":\"a\",\"choices\":[{\"text\":\"x\",\"finish_reason\":\"stop\"}]}\n\n"
                .to_vec();
        cut.feed(&mut buf);
        assert!(!cut.complete());
    }
}
