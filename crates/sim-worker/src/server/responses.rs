//! The answers' JSON, shaped like vLLM's OpenAI server: whole responses,
//! and the chunks of a streamed one (`data: {...}\n\n`, then
//! `data: [DONE]\n\n`).

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{Value, json};

use super::prompt::{Kind, Prepared};
use crate::Admission;

/// What every chunk and answer of one request repeats.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// `cmpl-…` or `chatcmpl-…`.
    pub id: String,
    /// Unix seconds of the request.
    pub created: u64,
    /// The request's `model`.
    pub model: String,
    /// The endpoint.
    pub kind: Kind,
}

impl Envelope {
    /// The envelope of request number `n` of worker `worker`.
    pub fn new(p: &Prepared, worker: &str, n: u64) -> Self {
        let prefix = match p.kind {
            Kind::Completions => "cmpl",
            Kind::Chat => "chatcmpl",
        };
        Envelope {
            id: format!("{prefix}-{worker}-{n}"),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            model: p.model.clone(),
            kind: p.kind,
        }
    }

    fn object(&self, streamed: bool) -> &'static str {
        match (self.kind, streamed) {
            (Kind::Completions, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }

    fn wrap(&self, streamed: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(streamed),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    /// The whole answer of a non-streamed request.
    pub fn full(&self, a: &Admission, text: &str) -> Value {
        let choice = match self.kind {
            Kind::Completions => json!({
                "index": 0, "text": text, "logprobs": null,
                "finish_reason": "length", "stop_reason": null, "prompt_logprobs": null,
            }),
            Kind::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": null,
                            "tool_calls": [], "reasoning_content": null},
                "logprobs": null, "finish_reason": "length", "stop_reason": null,
            }),
        };
        let mut v = self.wrap(false, json!([choice]));
        v["usage"] = usage(a);
        v
    }

    /// The first chunk of a streamed chat answer: the role, no content.
    pub fn role_chunk(&self) -> Bytes {
        let choice = json!({
            "index": 0, "delta": {"role": "assistant", "content": ""},
            "logprobs": null, "finish_reason": null,
        });
        sse(&self.wrap(true, json!([choice])))
    }

    /// The chunk of one output token; the last one says why it ended.
    pub fn token_chunk(&self, text: &str, last: bool) -> Bytes {
        let finish = if last { json!("length") } else { Value::Null };
        let choice = match self.kind {
            Kind::Completions => json!({
                "index": 0, "text": text, "logprobs": null,
                "finish_reason": finish, "stop_reason": null,
            }),
            Kind::Chat => json!({
                "index": 0, "delta": {"content": text},
                "logprobs": null, "finish_reason": finish, "stop_reason": null,
            }),
        };
        sse(&self.wrap(true, json!([choice])))
    }

    /// The final usage chunk (`stream_options.include_usage`).
    pub fn usage_chunk(&self, a: &Admission) -> Bytes {
        let mut v = self.wrap(true, json!([]));
        v["usage"] = usage(a);
        sse(&v)
    }
}

/// The end of a stream.
pub fn done_chunk() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// `usage`, with the prompt tokens not computed (as vLLM counts them:
/// prefix cache, CPU tier and a remote prefill's KV).
pub fn usage(a: &Admission) -> Value {
    json!({
        "prompt_tokens": a.prompt_tokens,
        "total_tokens": a.prompt_tokens + a.output_tokens,
        "completion_tokens": a.output_tokens,
        "prompt_tokens_details": {"cached_tokens": a.reported_cached_tokens()},
    })
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}
