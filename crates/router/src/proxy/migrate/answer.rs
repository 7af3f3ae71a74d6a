//! [`Answer`]: one streamed answer as the client sees it, across the
//! workers that produced it. It reads each event of the current worker,
//! keeps the prompt's and the generated token ids, and rewrites what the
//! client gets: the first worker's `id`, `created` and `model` on every
//! chunk, the ids only when the client asked for them, a continuation's
//! completion chunks reshaped as chat chunks for a chat request, and the
//! usage of the whole answer.

use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value, json};

use super::chunk::{Shape, View};
use super::eligible::Eligible;
use super::ids::scan;
use super::sse::{event_data, write_event, write_sse};
use tokenize::read_token_ids;

/// A chunk's envelope, read from the first chunk of an answer.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    created: Value,
    #[serde(default)]
    model: Value,
}

/// Why the current worker's stream cannot go on.
#[derive(Debug, Clone)]
pub(super) struct Broken(pub(super) String);

/// What the current worker was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// The client's request (the first worker, or a restart before
    /// anything reached the client).
    Original,
    /// A completion from the prompt's ids and those generated so far.
    Continuation,
}

/// One answer across workers; see the module docs.
pub(super) struct Answer {
    request: Eligible,
    upstream: Upstream,
    /// `id`, `created` and `model` of the first chunk the client got.
    head: Option<(Value, Value, Value)>,
    /// The prompt's ids as the first worker's first chunk has them (`[…]`,
    /// parsed only when the answer moves).
    prompt: Option<Bytes>,
    /// Every token generated so far.
    generated: Vec<u32>,
    /// A `finish_reason` arrived.
    finished: bool,
    /// `[DONE]` arrived after it.
    pub(super) done: bool,
    /// Times the answer moved to another worker.
    pub(super) moves: u32,
    /// Why it cannot be continued, once something seen says so.
    stuck: Option<&'static str>,
}

impl Answer {
    pub(super) fn new(request: Eligible) -> Self {
        // Room for every id the answer may have (within reason): the ids
        // are added one chunk at a time.
        let room = request.max_tokens.map_or(0, |m| m.min(4096) as usize);
        Answer {
            generated: Vec::with_capacity(room),
            request,
            upstream: Upstream::Original,
            head: None,
            prompt: None,
            finished: false,
            done: false,
            moves: 0,
            stuck: None,
        }
    }

    /// Reads one event (`raw` as sent, `data` its data) and appends what
    /// the client gets of it to `out`.
    ///
    /// The first worker's chunks are read without serde (`ids::scan`
    /// vouches for almost all) and go to the client as sent, or without
    /// the id fields the client did not ask for, byte for byte; a moved
    /// answer's chunks are rebuilt.
    pub(super) fn on_event(
        &mut self,
        raw: &[u8],
        data: &Bytes,
        out: &mut BytesMut,
    ) -> Result<(), Broken> {
        if data == b"[DONE]".as_slice() {
            if !self.finished {
                return Err(Broken(
                    "the worker ended the stream before the answer".into(),
                ));
            }
            self.done = true;
            out.extend_from_slice(raw);
            return Ok(());
        }
        // The id fields found in the bytes; the rest read without building
        // the chunk (a chunk shaped otherwise is read whole, and cannot move).
        let Some(mut ids) = scan(data) else {
            return self.on_odd_event(data, out);
        };
        // The chunk without them, as the client's event, when serde must
        // read it (the scan could not vouch for it; the first chunk's
        // envelope).
        let lean = (ids.any() && (ids.view.is_none() || self.head.is_none())).then(|| {
            let mut event = Vec::with_capacity(ids.kept_len(data.len()) + 8);
            write_event(&ids, data, &mut event);
            event
        });
        let json = lean.as_deref().and_then(event_data).unwrap_or(data);
        let view = match ids.view.take() {
            Some(view) => view,
            None => match serde_json::from_slice::<View>(json) {
                Ok(view) => view,
                Err(_) => return self.on_odd_event(data, out),
            },
        };
        if view.error != Shape::Absent {
            return self.on_odd_event(data, out);
        }
        if self.head.is_none() {
            let head: Head = serde_json::from_slice(json)
                .map_err(|e| Broken(format!("the worker sent an event that is not JSON: {e}")))?;
            self.head = Some((head.id, head.created, head.model));
            if self.upstream == Upstream::Original {
                self.prompt = ids.prompt.clone().map(|r| data.slice(r));
                if self.prompt.is_none() {
                    self.stuck = Some("the worker sent no prompt_token_ids");
                }
            }
        }
        let choices = &view.choices;
        if choices.several {
            self.stuck = Some("several choices");
        }
        if let Some(c) = &choices.first {
            let delta = c.delta.as_ref();
            let text = match c.text {
                Shape::Absent => delta.map_or(Shape::Absent, |d| d.content),
                t => t,
            };
            match ids.generated.clone().and_then(|r| data.get(r)) {
                Some(list) => {
                    if read_token_ids(list, &mut self.generated).is_none() {
                        self.stuck = Some("token_ids out of range");
                    }
                }
                // A chat role chunk has neither text nor ids.
                None if text != Shape::Text => {}
                None => self.stuck = Some("the worker sent no token_ids"),
            }
            if c.finish_reason.filled() {
                self.finished = true;
            }
            if delta.is_some_and(|d| {
                d.tool_calls.filled() || d.reasoning_content.filled() || d.reasoning.filled()
            }) {
                self.stuck = Some("tool-call or reasoning parsing");
            }
        }
        let usage_only = choices.first.is_none() && view.usage != Shape::Absent;
        // The first worker's chunks go as sent unless they carry ids the
        // client did not ask for; then without them, byte for byte.
        if self.moves == 0 {
            match lean {
                _ if !ids.any() || self.request.client_ids => out.extend_from_slice(raw),
                Some(event) => out.extend_from_slice(&event),
                None => write_event(&ids, data, out),
            }
            return Ok(());
        }
        let mut v: Value = serde_json::from_slice(data)
            .map_err(|e| Broken(format!("the worker sent an event that is not JSON: {e}")))?;
        let rebuilt = match (self.upstream, self.request.chat) {
            (Upstream::Continuation, true) if !usage_only => self.as_chat_chunk(&v),
            _ => {
                self.rewrite(&mut v, usage_only);
                v
            }
        };
        write_sse(&rebuilt, out);
        Ok(())
    }

    /// An event [`View`] cannot read: an error event (the worker failed),
    /// one that is not JSON (likewise), or a chunk shaped otherwise than
    /// vLLM's, relayed without the ids but not continued.
    fn on_odd_event(&mut self, data: &[u8], out: &mut BytesMut) -> Result<(), Broken> {
        let mut v: Value = serde_json::from_slice(data)
            .map_err(|e| Broken(format!("the worker sent an event that is not JSON: {e}")))?;
        if let Some(err) = v.get("error") {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error");
            return Err(Broken(format!("the worker sent an error event: {msg}")));
        }
        self.stuck = Some("a chunk shaped otherwise than vLLM's");
        if self.head.is_none() {
            self.head = Some((v["id"].clone(), v["created"].clone(), v["model"].clone()));
        }
        self.rewrite(&mut v, false);
        write_sse(&v, out);
        Ok(())
    }

    /// The chunk `v` of this answer as the client gets it: the first
    /// chunk's envelope, ids only when asked, the whole answer's usage.
    fn rewrite(&self, v: &mut Value, usage_only: bool) {
        if let (Some((id, created, model)), Some(obj)) = (&self.head, v.as_object_mut()) {
            obj.insert("id".into(), id.clone());
            obj.insert("created".into(), created.clone());
            obj.insert("model".into(), model.clone());
            if self.request.chat {
                obj.insert("object".into(), json!("chat.completion.chunk"));
            }
            if !self.request.client_ids || self.upstream == Upstream::Continuation {
                obj.remove("prompt_token_ids");
            }
        }
        if let Some(choices) = v["choices"].as_array_mut() {
            for c in choices.iter_mut().filter_map(Value::as_object_mut) {
                if !self.request.client_ids {
                    c.remove("token_ids");
                }
                if !self.request.client_ids || self.upstream == Upstream::Continuation {
                    c.remove("prompt_token_ids");
                }
            }
        }
        if usage_only && self.moves > 0 {
            v["usage"] = self.usage(&v["usage"]);
        }
    }

    /// A continuation's completion chunk as a chat chunk.
    fn as_chat_chunk(&self, v: &Value) -> Value {
        let c = &v["choices"][0];
        let mut choice = Map::new();
        choice.insert("index".into(), json!(0));
        choice.insert("delta".into(), json!({"content": c["text"].clone()}));
        choice.insert("logprobs".into(), Value::Null);
        choice.insert("finish_reason".into(), c["finish_reason"].clone());
        if let Some(stop) = c.get("stop_reason") {
            choice.insert("stop_reason".into(), stop.clone());
        }
        if self.request.client_ids
            && let Some(ids) = c.get("token_ids")
        {
            choice.insert("token_ids".into(), ids.clone());
        }
        let (id, created, model) = self.head.clone().unwrap_or_default();
        json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [Value::Object(choice)],
        })
    }

    /// The usage of the whole answer: the prompt as first sent, every
    /// token generated; cached tokens as the last worker found them,
    /// within the prompt.
    pub(super) fn usage(&self, last: &Value) -> Value {
        let prompt = self.prompt_ids().map_or(0, |p| p.len()) as u64;
        let completion = self.generated.len() as u64;
        let mut u = json!({
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        });
        if let Some(cached) = last
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
        {
            u["prompt_tokens_details"] = json!({"cached_tokens": cached.min(prompt)});
        }
        u
    }

    /// Why the answer cannot move to another worker now, if it cannot.
    pub(super) fn stuck(&self) -> Option<&'static str> {
        // Nothing reached the client yet: its request can start again.
        self.head.as_ref()?;
        self.stuck.or(match (&self.prompt, self.prompt_ids()) {
            (None, _) => Some("the worker sent no prompt_token_ids"),
            (Some(_), None) => Some("prompt_token_ids out of range"),
            _ => None,
        })
    }

    /// The prompt's ids (parsed from the first chunk's bytes).
    fn prompt_ids(&self) -> Option<Vec<u32>> {
        let raw = self.prompt.as_ref()?;
        let mut ids = Vec::with_capacity(raw.len() / 4);
        read_token_ids(raw, &mut ids)?;
        Some(ids)
    }

    /// The body for the next worker and its path: the client's request
    /// when nothing reached the client yet, else a completion from the
    /// prompt's ids and those generated. `original` is the client's body.
    pub(super) fn next_request(&self, original: &Bytes) -> Result<(bool, Bytes, Vec<u32>), Broken> {
        if self.head.is_none() || self.prompt.is_none() {
            return Ok((false, original.clone(), Vec::new()));
        }
        let mut tokens = self
            .prompt_ids()
            .ok_or_else(|| Broken("prompt_token_ids out of range".into()))?;
        tokens.extend_from_slice(&self.generated);
        let mut body: Map<String, Value> = serde_json::from_slice(original)
            .map_err(|e| Broken(format!("the request body: {e}")))?;
        if self.request.chat {
            for key in CHAT_ONLY {
                body.shift_remove(key);
            }
        }
        let generated = self.generated.len() as u64;
        body.insert("prompt".into(), json!(tokens));
        match self.request.max_tokens {
            Some(max) if max <= generated => {
                return Err(Broken("the answer had all its tokens".into()));
            }
            Some(max) => {
                body.insert("max_tokens".into(), json!(max - generated));
            }
            None => {
                body.shift_remove("max_tokens");
            }
        }
        if let Some(min) = body.get("min_tokens").and_then(Value::as_u64) {
            body.insert("min_tokens".into(), json!(min.saturating_sub(generated)));
        }
        body.insert("stream".into(), json!(true));
        if !self.request.streamed {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        body.insert("return_token_ids".into(), json!(true));
        let bytes = serde_json::to_vec(&body).map_err(|e| Broken(e.to_string()))?;
        Ok((true, Bytes::from(bytes), tokens))
    }

    /// The next worker was asked `continued` (else the client's request
    /// again).
    pub(super) fn moved(&mut self, continued: bool) {
        self.moves += 1;
        self.upstream = if continued {
            Upstream::Continuation
        } else {
            Upstream::Original
        };
    }
}

/// Chat fields a completion does not take (the prompt is already
/// rendered).
const CHAT_ONLY: [&str; 14] = [
    "messages",
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "documents",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_completion_tokens",
    "mm_processor_kwargs",
    "add_special_tokens",
    "reasoning_effort",
    "include_reasoning",
];

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
