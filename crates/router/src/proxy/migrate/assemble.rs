//! A migratable non-streamed request, served from a stream: its workers
//! are asked for a stream (`stream: true`, `stream_options.include_usage`,
//! `return_token_ids`), the relay moves it like any streamed answer, and
//! [`Assembly`] folds the chunks as a streamed client would have got them
//! into the one JSON object vLLM answers a non-streamed request with:
//! `id`, `object`, `created`, `model`, one choice (completions: `text`;
//! chat: `message`) with its `finish_reason` and `stop_reason`, and the
//! usage of the whole answer; the ids only when the client asked for them.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::eligible::Eligible;

/// `body` (a non-streamed request's) as its workers are asked it: streamed,
/// with the usage chunk and the ids. The fields are replaced, not
/// appended (a repeated key is an error in some parsers).
pub(super) fn as_stream(body: &Bytes) -> Bytes {
    let Ok(mut map) = serde_json::from_slice::<Map<String, Value>>(body) else {
        return body.clone();
    };
    map.insert("stream".into(), json!(true));
    map.insert("stream_options".into(), json!({"include_usage": true}));
    map.insert("return_token_ids".into(), json!(true));
    serde_json::to_vec(&map).map_or_else(|_| body.clone(), Bytes::from)
}

/// One non-streamed answer being put together; see the module docs.
pub(super) struct Assembly {
    chat: bool,
    /// The client asked for the ids.
    ids: bool,
    /// `id`, `created` and `model` of the first chunk.
    head: Option<(Value, Value, Value)>,
    role: Value,
    text: String,
    token_ids: Vec<Value>,
    /// The prompt's ids, when the client asked for them.
    prompt_ids: Option<Value>,
    finish_reason: Value,
    stop_reason: Value,
    usage: Option<Value>,
}

impl Assembly {
    pub(super) fn new(request: &Eligible) -> Self {
        Assembly {
            chat: request.chat,
            ids: request.client_ids,
            head: None,
            role: json!("assistant"),
            text: String::new(),
            token_ids: Vec::new(),
            prompt_ids: None,
            finish_reason: Value::Null,
            stop_reason: Value::Null,
            usage: None,
        }
    }

    /// Adds one event's data as the client's stream would carry it.
    pub(super) fn add(&mut self, data: &[u8]) {
        if data == b"[DONE]" {
            return;
        }
        let Ok(mut v) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if self.head.is_none() {
            self.head = Some((v["id"].take(), v["created"].take(), v["model"].take()));
        }
        if let Some(u) = v.get_mut("usage").filter(|u| !u.is_null()) {
            self.usage = Some(u.take());
        }
        if self.ids
            && self.prompt_ids.is_none()
            && let Some(p) = v.get_mut("prompt_token_ids")
        {
            self.prompt_ids = Some(p.take());
        }
        let Some(c) = v.pointer_mut("/choices/0") else {
            return;
        };
        if let Some(role) = c.pointer_mut("/delta/role").filter(|r| !r.is_null()) {
            self.role = role.take();
        }
        let text = c.get("text").or_else(|| c.pointer("/delta/content"));
        if let Some(t) = text.and_then(Value::as_str) {
            self.text.push_str(t);
        }
        if let Some(ids) = c.get_mut("token_ids").and_then(Value::as_array_mut) {
            self.token_ids.append(ids);
        }
        if self.ids
            && self.prompt_ids.is_none()
            && let Some(p) = c.get_mut("prompt_token_ids")
        {
            self.prompt_ids = Some(p.take());
        }
        if !c["finish_reason"].is_null() {
            self.finish_reason = c["finish_reason"].take();
            self.stop_reason = c.get_mut("stop_reason").map_or(Value::Null, Value::take);
        }
    }

    /// The whole answer; `usage` when no usage chunk came.
    pub(super) fn finish(self, usage: impl FnOnce() -> Value) -> Value {
        let (id, created, model) = self.head.unwrap_or_default();
        let mut choice = if self.chat {
            json!({
                "index": 0,
                "message": {"role": self.role, "content": self.text, "refusal": null,
                            "tool_calls": [], "reasoning_content": null},
                "logprobs": null, "finish_reason": self.finish_reason,
                "stop_reason": self.stop_reason,
            })
        } else {
            json!({
                "index": 0, "text": self.text, "logprobs": null,
                "finish_reason": self.finish_reason, "stop_reason": self.stop_reason,
                "prompt_logprobs": null,
            })
        };
        if self.ids {
            choice["token_ids"] = Value::Array(self.token_ids);
        }
        let object = if self.chat {
            "chat.completion"
        } else {
            "text_completion"
        };
        let mut v = json!({
            "id": id, "object": object, "created": created, "model": model,
            "choices": [choice],
        });
        if let Some(p) = self.prompt_ids {
            if self.chat {
                v["prompt_token_ids"] = p;
            } else {
                v["choices"][0]["prompt_token_ids"] = p;
            }
        }
        v["usage"] = self.usage.unwrap_or_else(usage);
        v
    }
}

/// The error answer of a non-streamed request whose worker failed and
/// whose answer could not move (502, nothing else reached the client).
pub(super) fn failed(message: &str) -> Value {
    json!({"error": {
        "object": "error", "message": message, "type": "worker_failed", "code": 502,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eligible(chat: bool, client_ids: bool) -> Eligible {
        Eligible {
            streamed: false,
            chat,
            client_ids,
            model: "m".into(),
            salt: None,
            max_tokens: Some(2),
        }
    }

    #[test]
    fn a_streamed_chat_answer_becomes_one_message() {
        let mut a = Assembly::new(&eligible(true, true));
        for chunk in [
            json!({"id": "c1", "created": 7, "model": "m", "prompt_token_ids": [1, 2],
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"id": "c1", "created": 7, "model": "m",
                   "choices": [{"index": 0, "delta": {"content": "Hi"}, "token_ids": [5],
                                "finish_reason": null}]}),
            json!({"id": "c1", "created": 7, "model": "m",
                   "choices": [{"index": 0, "delta": {"content": "!"}, "token_ids": [6],
                                "finish_reason": "length", "stop_reason": null}]}),
            json!({"id": "c1", "created": 7, "model": "m", "choices": [],
                   "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}}),
        ] {
            a.add(chunk.to_string().as_bytes());
        }
        a.add(b"[DONE]");
        let v = a.finish(|| unreachable!());
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["id"], "c1");
        assert_eq!(v["choices"][0]["message"]["content"], "Hi!");
        assert_eq!(v["choices"][0]["token_ids"], json!([5, 6]));
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["prompt_token_ids"], json!([1, 2]));
        assert_eq!(v["usage"]["total_tokens"], 4);
    }

    #[test]
    fn the_ids_stay_out_unless_asked_and_the_body_asks_for_a_stream() {
        let mut a = Assembly::new(&eligible(false, false));
        a.add(br#"{"id":"x","created":1,"model":"m","choices":[{"index":0,"text":"a","token_ids":[3],"prompt_token_ids":[1],"finish_reason":"length"}]}"#);
        let v = a.finish(|| json!({"completion_tokens": 1}));
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], "a");
        assert!(v["choices"][0].get("token_ids").is_none(), "{v}");
        assert!(v["choices"][0].get("prompt_token_ids").is_none(), "{v}");
        assert_eq!(v["usage"]["completion_tokens"], 1);
        let sent = as_stream(&Bytes::from_static(br#"{"prompt":"p","stream":false}"#));
        let sent: Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(sent["stream"], true);
        assert_eq!(sent["stream_options"]["include_usage"], true);
        assert_eq!(sent["return_token_ids"], true);
    }
}
