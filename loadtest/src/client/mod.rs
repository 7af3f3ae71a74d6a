//! The load generator's HTTP client: sends one completions or chat request,
//! streamed (SSE) or not, and measures it: time to the first content chunk,
//! end to end, tokens, the worker that served it and its cached tokens
//! (`x-sim-cached-tokens`, else `usage.prompt_tokens_details.cached_tokens`).

mod sse;

pub use sse::StreamState;

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use protocol::headers::{SIM_CACHED_TOKENS_HEADER, SIM_WORKER_HEADER, WORKER_HEADER};

use crate::workload::{Api, Message};

/// What one request gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// The HTTP status, if an answer came.
    pub status: Option<u16>,
    /// Why it failed (non-2xx, transport error, stream cut), if it did.
    pub error: Option<String>,
    /// Time to the first content chunk (streamed requests only).
    pub ttft: Option<Duration>,
    /// Time to the end of the answer.
    pub e2e: Duration,
    /// Prompt tokens, from `usage`.
    pub prompt_tokens: Option<u64>,
    /// Prompt tokens served from the worker's cache.
    pub cached_tokens: Option<u64>,
    /// Output tokens (usage, else content chunks).
    pub completion_tokens: u64,
    /// The worker that served it.
    pub worker: Option<String>,
    /// The answer's text (chat sessions resend it).
    pub answer: String,
}

impl Outcome {
    /// Whether the request succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    fn failed(start: Instant, status: Option<u16>, error: String) -> Outcome {
        Outcome {
            status,
            error: Some(error),
            e2e: start.elapsed(),
            ..Outcome::default()
        }
    }
}

/// A completions body; `prompt` is a string or an array of token ids.
pub fn completion_body(model: &str, prompt: Value, max_tokens: u32, stream: bool) -> Value {
    let mut b = json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": stream,
    });
    if stream {
        b["stream_options"] = json!({ "include_usage": true });
    }
    b
}

/// A chat body.
pub fn chat_body(model: &str, messages: &[Message], max_tokens: u32, stream: bool) -> Value {
    let mut b = json!({
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": stream,
    });
    if stream {
        b["stream_options"] = json!({ "include_usage": true });
    }
    b
}

/// A client of one base URL (the balancer, or one sim for calibration).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    timeout: Duration,
}

impl Client {
    /// A keep-alive client of `base` with a per-request `timeout`.
    pub fn new(base: &str, timeout: Duration) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .context("building the HTTP client")?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            timeout,
        })
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends `body` to `api`'s route and reads the whole answer.
    pub async fn send(&self, api: Api, body: &Value) -> Outcome {
        self.send_with(api, body, &[]).await
    }

    /// As [`send`](Self::send), with extra request `headers` (a tenant, an
    /// objective).
    pub async fn send_with(&self, api: Api, body: &Value, headers: &[(String, String)]) -> Outcome {
        let path = match api {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
        };
        let stream = body["stream"].as_bool().unwrap_or(false);
        let start = Instant::now();
        let exchange = self.exchange(path, body, headers, stream, start);
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(o) => o,
            Err(_) => Outcome::failed(start, None, format!("timeout after {:?}", self.timeout)),
        }
    }

    async fn exchange(
        &self,
        path: &str,
        body: &Value,
        headers: &[(String, String)],
        stream: bool,
        start: Instant,
    ) -> Outcome {
        let bytes = match serde_json::to_vec(body) {
            Ok(b) => b,
            Err(e) => return Outcome::failed(start, None, format!("encoding the body: {e}")),
        };
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let resp = request.body(bytes).send().await;
        let mut resp = match resp {
            Ok(r) => r,
            Err(e) => return Outcome::failed(start, None, format!("transport: {e}")),
        };
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let worker = header(SIM_WORKER_HEADER).or_else(|| header(WORKER_HEADER));
        let cached_header = header(SIM_CACHED_TOKENS_HEADER).and_then(|v| v.parse::<u64>().ok());
        if !resp.status().is_success() {
            let text = resp.text().await.unwrap_or_default();
            let short: String = text.chars().take(200).collect();
            return Outcome::failed(start, Some(status), format!("HTTP {status}: {short}"));
        }
        let mut out = Outcome {
            status: Some(status),
            worker,
            ..Outcome::default()
        };
        if stream {
            let mut s = StreamState::default();
            loop {
                match resp.chunk().await {
                    Ok(Some(chunk)) => {
                        if s.feed(&chunk) && out.ttft.is_none() {
                            out.ttft = Some(start.elapsed());
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        out.error = Some(format!("stream cut: {e}"));
                        break;
                    }
                }
            }
            if out.error.is_none() {
                out.error = s
                    .error
                    .as_ref()
                    .map(|e| format!("stream ended by an error event: {e}"))
                    .or_else(|| (!s.done).then(|| "stream ended without [DONE]".to_owned()))
                    .or_else(|| {
                        (!s.finished).then(|| "stream ended without a finish_reason".to_owned())
                    });
            }
            out.prompt_tokens = s.prompt_tokens;
            out.completion_tokens = s.completion_tokens.unwrap_or(s.content_chunks);
            out.cached_tokens = cached_header.or(s.cached_tokens);
            out.answer = s.text;
        } else {
            match resp.json::<Value>().await {
                Ok(v) => {
                    let u = &v["usage"];
                    out.prompt_tokens = u["prompt_tokens"].as_u64();
                    out.completion_tokens = u["completion_tokens"].as_u64().unwrap_or(0);
                    out.cached_tokens =
                        cached_header.or(u["prompt_tokens_details"]["cached_tokens"].as_u64());
                    let c = &v["choices"][0];
                    out.answer = c["text"]
                        .as_str()
                        .or_else(|| c["message"]["content"].as_str())
                        .unwrap_or("")
                        .to_owned();
                }
                Err(e) => out.error = Some(format!("reading the answer: {e}")),
            }
        }
        out.e2e = start.elapsed();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_ask_for_usage_when_streamed() {
        let b = completion_body("m", json!([1, 2]), 4, true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["prompt"], json!([1, 2]));
        let c = chat_body("m", &[Message::new("user", "hi")], 4, false);
        assert!(c.get("stream_options").is_none());
        assert_eq!(c["messages"][0]["role"], "user");
    }

    #[tokio::test]
    async fn transport_errors_are_outcomes() {
        let port = fleet::free_port().unwrap();
        let c = Client::new(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(2)).unwrap();
        let o = c
            .send(Api::Completions, &completion_body("m", json!("x"), 1, true))
            .await;
        assert!(!o.ok());
        assert!(o.error.unwrap().starts_with("transport"));
    }
}
