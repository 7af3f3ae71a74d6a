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
    /// `return_token_ids`: ids in the answer, where vLLM puts them
    /// (completions: `prompt_token_ids` and `token_ids` in each choice;
    /// chat: `prompt_token_ids` beside `choices`, `token_ids` in each).
    pub token_ids: bool,
}

/// One choice's answer: its prompt's ids and what it generated.
#[derive(Debug, Clone, Copy)]
pub struct Choice<'a> {
    /// Its index among the request's prompts.
    pub index: usize,
    /// Its prompt's ids.
    pub prompt: &'a [u32],
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
            token_ids: p.return_token_ids,
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

    /// The whole answer of a non-streamed request: one choice per prompt,
    /// each with its text and generated ids.
    pub fn full(&self, choices: &[(Choice<'_>, String, Vec<u32>)], usage: Value) -> Value {
        let list: Vec<Value> = choices
            .iter()
            .map(|(c, text, ids)| {
                let mut choice = match self.kind {
                    Kind::Completions => json!({
                        "index": c.index, "text": text, "logprobs": null,
                        "finish_reason": "length", "stop_reason": null, "prompt_logprobs": null,
                    }),
                    Kind::Chat => json!({
                        "index": c.index,
                        "message": {"role": "assistant", "content": text, "refusal": null,
                                    "tool_calls": [], "reasoning_content": null},
                        "logprobs": null, "finish_reason": "length", "stop_reason": null,
                    }),
                };
                if self.token_ids {
                    choice["token_ids"] = json!(ids);
                    if self.kind == Kind::Completions {
                        choice["prompt_token_ids"] = json!(c.prompt);
                    }
                }
                choice
            })
            .collect();
        let mut v = self.wrap(false, Value::Array(list));
        if self.token_ids
            && self.kind == Kind::Chat
            && let Some((c, _, _)) = choices.first()
        {
            v["prompt_token_ids"] = json!(c.prompt);
        }
        v["usage"] = usage;
        v
    }

    /// The first chunk of a streamed chat answer: the role, no content
    /// (and the prompt's ids, when asked).
    pub fn role_chunk(&self, c: Choice<'_>) -> Bytes {
        let choice = json!({
            "index": c.index, "delta": {"role": "assistant", "content": ""},
            "logprobs": null, "finish_reason": null,
        });
        let mut v = self.wrap(true, json!([choice]));
        if self.token_ids {
            v["prompt_token_ids"] = json!(c.prompt);
        }
        sse(&v)
    }

    /// The chunk of output token `id` (its text `text`) of choice `c`, the
    /// `first` of its answer or not; the last one says why it ended.
    pub fn token_chunk(
        &self,
        c: Choice<'_>,
        id: u32,
        text: &str,
        first: bool,
        last: bool,
    ) -> Bytes {
        let finish = if last { json!("length") } else { Value::Null };
        let mut choice = match self.kind {
            Kind::Completions => json!({
                "index": c.index, "text": text, "logprobs": null,
                "finish_reason": finish, "stop_reason": null,
            }),
            Kind::Chat => json!({
                "index": c.index, "delta": {"content": text},
                "logprobs": null, "finish_reason": finish, "stop_reason": null,
            }),
        };
        if self.token_ids {
            choice["token_ids"] = json!([id]);
            if first && self.kind == Kind::Completions {
                choice["prompt_token_ids"] = json!(c.prompt);
            }
        }
        sse(&self.wrap(true, json!([choice])))
    }

    /// The final usage chunk (`stream_options.include_usage`).
    pub fn usage_chunk(&self, usage: Value) -> Bytes {
        let mut v = self.wrap(true, json!([]));
        v["usage"] = usage;
        sse(&v)
    }

    /// An error inside a stream, as vLLM sends one (then `[DONE]`).
    pub fn error_chunk(message: &str) -> Bytes {
        sse(&json!({"error": {
            "object": "error", "message": message, "type": "InternalServerError",
            "param": null, "code": 500,
        }}))
    }
}

/// The end of a stream.
pub fn done_chunk() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// `usage` of the choices admitted as `a`, with the prompt tokens not
/// computed (as vLLM counts them: prefix cache, CPU tier and a remote
/// prefill's KV).
pub fn usage(a: &[Admission]) -> Value {
    let prompt: usize = a.iter().map(|a| a.prompt_tokens).sum();
    let output: usize = a.iter().map(|a| a.output_tokens).sum();
    let cached: usize = a.iter().map(Admission::reported_cached_tokens).sum();
    json!({
        "prompt_tokens": prompt,
        "total_tokens": prompt + output,
        "completion_tokens": output,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}
