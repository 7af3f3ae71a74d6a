//! From an OpenAI request body to what the engine needs: the prompt's token
//! ids and block hashes, computed exactly as the router computes them
//! ([`ModelPipeline`]), and the output length.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::Value;

use super::error::SimError;
use protocol::hashing::BlockHash;
use tokenize::{CompletionPrompt, ModelPipeline, completion_prompt};

/// Which OpenAI endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
}

/// One prompt of a request: its ids and block hashes.
#[derive(Debug, Clone)]
pub struct PromptIds {
    /// The prompt's token ids (for an unreproducible chat prompt, an
    /// estimate of their number).
    pub tokens: Arc<[u32]>,
    /// The hashes of the prompt's full blocks; empty when the prompt cannot
    /// be reproduced exactly (then it is never cached).
    pub hashes: Vec<BlockHash>,
}

/// A request, reduced to what the simulation and the answer need.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The endpoint.
    pub kind: Kind,
    /// The `model` of the request (echoed in the answer).
    pub model: String,
    /// Its prompts, one choice each: a completions request may give a
    /// list; a chat request has one.
    pub prompts: Vec<PromptIds>,
    /// Tokens to generate.
    pub max_tokens: usize,
    /// Server-sent events instead of one JSON answer.
    pub stream: bool,
    /// `stream_options.include_usage`: a final usage chunk.
    pub include_usage: bool,
    /// `return_token_ids` (vLLM's): the prompt's and the answer's ids in
    /// the answer.
    pub return_token_ids: bool,
    /// The request's `kv_transfer_params`, as given (`server::disagg`
    /// reads them).
    pub kv_transfer_params: Option<Value>,
}

fn bad(message: impl Into<String>) -> SimError {
    SimError::new(StatusCode::BAD_REQUEST, "BadRequestError", message)
}

/// Parses and tokenizes `body` for `served_model` (CPU-bound: call it off
/// the async threads for long prompts).
pub fn prepare(
    kind: Kind,
    body: &[u8],
    pipeline: &ModelPipeline,
    served_model: &str,
    default_max_tokens: usize,
) -> Result<Prepared, SimError> {
    let json = parse_body(body)?;
    let model = served(&json, served_model)?;
    let max_tokens = max_tokens(kind, &json, default_max_tokens)?;
    let salt = tokenize::cache_salt(&json["cache_salt"]);
    let hashed = |(tokens, exact): (Vec<u32>, bool)| {
        let hashes = if exact {
            pipeline.block_hashes(&tokens, salt.clone(), None)
        } else {
            Vec::new()
        };
        PromptIds {
            tokens: Arc::from(tokens),
            hashes,
        }
    };
    let prompts = match kind {
        Kind::Completions => each_prompt(&json)?
            .into_iter()
            .map(|p| Ok(hashed((nonempty(prompt_tokens(p, pipeline)?)?, true))))
            .collect::<Result<Vec<_>, SimError>>()?,
        Kind::Chat => vec![hashed(prompt_ids(kind, &json, body, pipeline)?)],
    };
    let stream = json.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = stream
        && json
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    Ok(Prepared {
        kind,
        model,
        prompts,
        max_tokens,
        stream,
        include_usage,
        return_token_ids: json
            .get("return_token_ids")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        kv_transfer_params: json.get("kv_transfer_params").cloned(),
    })
}

/// The body as JSON, or a 400.
pub fn parse_body(body: &[u8]) -> Result<Value, SimError> {
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid JSON body: {e}")))
}

/// The request's `model` (the served one when absent), or a 404 when it
/// names another.
pub fn served(json: &Value, served_model: &str) -> Result<String, SimError> {
    let model = json
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(served_model)
        .to_owned();
    if model != served_model {
        return Err(SimError::new(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!("The model `{model}` does not exist."),
        ));
    }
    Ok(model)
}

/// The prompt's token ids, exactly as the engine caches them (chat: after
/// the chat template), and whether they are exact (an unreproducible chat
/// prompt gives an estimate). The one path from a body to the ids that
/// both the OpenAI routes and the render routes take.
pub fn prompt_ids(
    kind: Kind,
    json: &Value,
    body: &[u8],
    pipeline: &ModelPipeline,
) -> Result<(Vec<u32>, bool), SimError> {
    let (tokens, exact) = match kind {
        Kind::Completions => (completion_tokens(json, pipeline)?, true),
        Kind::Chat => chat_tokens(json, body, pipeline)?,
    };
    Ok((nonempty(tokens)?, exact))
}

/// `tokens`, or a 400 when there are none.
pub fn nonempty(tokens: Vec<u32>) -> Result<Vec<u32>, SimError> {
    if tokens.is_empty() {
        return Err(bad("The prompt must not be empty."));
    }
    Ok(tokens)
}

/// Every prompt of a completions body: a list of strings or of id lists
/// is several prompts; anything else is one.
pub fn each_prompt(json: &Value) -> Result<Vec<CompletionPrompt>, SimError> {
    let bad = |e: tokenize::InvalidPrompt| SimError::bad_request(e.to_string());
    match json.get("prompt") {
        Some(Value::Array(items))
            if items.first().is_some_and(|f| f.is_string() || f.is_array()) =>
        {
            items
                .iter()
                .map(|p| completion_prompt(&serde_json::json!({ "prompt": p })).map_err(bad))
                .collect()
        }
        _ => Ok(vec![completion_prompt(json).map_err(bad)?]),
    }
}

/// `max_tokens` (chat: `max_completion_tokens` first), at least 1.
fn max_tokens(kind: Kind, json: &Value, default: usize) -> Result<usize, SimError> {
    let keys: &[&str] = match kind {
        Kind::Completions => &["max_tokens"],
        Kind::Chat => &["max_completion_tokens", "max_tokens"],
    };
    let Some(v) = keys
        .iter()
        .find_map(|k| json.get(*k).filter(|v| !v.is_null()))
    else {
        return Ok(default.max(1));
    };
    match v.as_u64() {
        Some(n) if n >= 1 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(bad(format!("max_tokens must be at least 1, got {v}"))),
    }
}

/// The first prompt of a completions request, as ids (a batch is answered
/// as its first prompt).
fn completion_tokens(json: &Value, pipeline: &ModelPipeline) -> Result<Vec<u32>, SimError> {
    let prompt = completion_prompt(json).map_err(|e| bad(e.to_string()))?;
    prompt_tokens(prompt, pipeline)
}

/// One completion prompt as ids: text tokenized as vLLM does (special
/// tokens added), ids as given.
pub fn prompt_tokens(
    prompt: CompletionPrompt,
    pipeline: &ModelPipeline,
) -> Result<Vec<u32>, SimError> {
    match prompt {
        CompletionPrompt::Text(text) => pipeline
            .tokenizer
            .encode(&text, true)
            .map_err(|e| bad(format!("tokenizing the prompt: {e}"))),
        CompletionPrompt::Tokens(ids) => Ok(ids),
    }
}

/// The prompt ids of a chat request and whether they are exact. A request
/// vLLM rejects is a 400; one whose prompt cannot be reproduced is still
/// answered, with an estimate of its length and no hashes.
fn chat_tokens(
    json: &Value,
    body: &[u8],
    pipeline: &ModelPipeline,
) -> Result<(Vec<u32>, bool), SimError> {
    let reason = match &pipeline.chat {
        Some(renderer) => match renderer.render_json(body) {
            Ok(prompt) => return Ok((prompt.token_ids, true)),
            Err(e) if e.is_client_error() => return Err(bad(e.to_string())),
            Err(e) => e.to_string(),
        },
        None => "the model's chat template cannot be reproduced".to_owned(),
    };
    tracing::debug!(reason, "chat prompt not reproducible; treated as uncached");
    let messages = json
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("messages must be a list"))?;
    let mut text = String::new();
    for m in messages {
        collect_text(m.get("content").unwrap_or(&Value::Null), &mut text);
        text.push('\n');
    }
    let mut ids = pipeline
        .tokenizer
        .encode(&text, false)
        .map_err(|e| bad(format!("tokenizing the messages: {e}")))?;
    // Role markers and the generation prompt: a few tokens per message.
    ids.extend(std::iter::repeat_n(0, 4 * messages.len() + 3));
    Ok((ids, false))
}

/// The text of a message's content: a string, or the `text` of its parts.
fn collect_text(content: &Value, out: &mut String) {
    match content {
        Value::String(s) => out.push_str(s),
        Value::Array(parts) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    out.push_str(t);
                }
            }
        }
        _ => {}
    }
}
