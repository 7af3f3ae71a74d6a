//! vLLM's render routes and `/tokenize`: a prompt's token ids exactly as
//! the sim caches them, without running it.
//!
//! * `POST /v1/completions/render` → a list, one item per prompt
//!   (`[{"request_id", "token_ids", "model", "cache_salt", …}]`);
//! * `POST /v1/chat/completions/render` → one such object, its ids after
//!   the chat template;
//! * `POST /tokenize` → `{"count", "max_model_len", "tokens", "token_strs"}`
//!   for a `prompt` or for `messages`.
//!
//! Routers that hash token ids themselves (vllm-router's `kv_aware`) ask a
//! worker for them with these routes (vLLM serves them with
//! `VLLM_ENABLE_SCALE_OUT_ENDPOINTS=1`). The ids come from
//! [`prompt_ids`](super::prompt::prompt_ids) and `prompt_tokens`, the path
//! the OpenAI routes take, so they equal what a request with the same body
//! caches. A chat prompt the sim cannot reproduce exactly is a 400 here
//! (the sim would not cache it either).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use super::app::App;
use super::error::SimError;
use super::prompt::{Kind, each_prompt, nonempty, parse_body, prompt_ids, prompt_tokens, served};
use tokenize::{CompletionPrompt, completion_prompt};

/// `POST /v1/completions/render`.
pub async fn completions_render(State(app): State<Arc<App>>, body: Bytes) -> Response {
    off_thread(app, body, render_completions).await
}

/// `POST /v1/chat/completions/render`.
pub async fn chat_render(State(app): State<Arc<App>>, body: Bytes) -> Response {
    off_thread(app, body, render_chat).await
}

/// `POST /tokenize`.
pub async fn tokenize(State(app): State<Arc<App>>, body: Bytes) -> Response {
    off_thread(app, body, tokenize_body).await
}

/// Runs `f` on a blocking thread (tokenizing is CPU-bound) and answers its
/// JSON or its error.
async fn off_thread(
    app: Arc<App>,
    body: Bytes,
    f: fn(&App, &[u8]) -> Result<Value, SimError>,
) -> Response {
    match tokio::task::spawn_blocking(move || f(&app, &body)).await {
        Ok(Ok(v)) => Json(v).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(e) => SimError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            format!("tokenizing task failed: {e}"),
        )
        .into_response(),
    }
}

/// One item of a render answer (the fields of vLLM's `GenerateRequest`
/// that a router reads, and a few more).
fn item(app: &App, json: &Value, model: &str, ids: Vec<u32>) -> Value {
    json!({
        "request_id": format!("render-{}", app.worker_id),
        "token_ids": ids,
        "token_offsets": null,
        "features": null,
        "model": model,
        "stream": false,
        "cache_salt": tokenize::cache_salt(&json["cache_salt"]),
        "priority": 0,
    })
}

fn render_completions(app: &App, body: &[u8]) -> Result<Value, SimError> {
    let json = parse_body(body)?;
    let model = served(&json, &app.model)?;
    let mut out = Vec::new();
    for prompt in each_prompt(&json)? {
        let ids = nonempty(prompt_tokens(prompt, &app.pipeline)?)?;
        out.push(item(app, &json, &model, ids));
    }
    Ok(Value::Array(out))
}

fn render_chat(app: &App, body: &[u8]) -> Result<Value, SimError> {
    let json = parse_body(body)?;
    let model = served(&json, &app.model)?;
    let ids = exact_chat_ids(app, &json, body)?;
    Ok(item(app, &json, &model, ids))
}

fn exact_chat_ids(app: &App, json: &Value, body: &[u8]) -> Result<Vec<u32>, SimError> {
    match prompt_ids(Kind::Chat, json, body, &app.pipeline)? {
        (ids, true) => Ok(ids),
        (_, false) => Err(SimError::bad_request(
            "the model's chat template cannot be reproduced for this request",
        )),
    }
}

fn tokenize_body(app: &App, body: &[u8]) -> Result<Value, SimError> {
    let json = parse_body(body)?;
    served(&json, &app.model)?;
    let ids = if json.get("messages").is_some() {
        exact_chat_ids(app, &json, body)?
    } else {
        let add_special = json
            .get("add_special_tokens")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        match completion_prompt(&json).map_err(|e| SimError::bad_request(e.to_string()))? {
            CompletionPrompt::Text(text) => app
                .pipeline
                .tokenizer
                .encode(&text, add_special)
                .map_err(|e| SimError::bad_request(format!("tokenizing the prompt: {e}")))?,
            CompletionPrompt::Tokens(ids) => ids,
        }
    };
    Ok(json!({
        "count": ids.len(),
        "max_model_len": app.max_model_len,
        "tokens": ids,
        "token_strs": null,
    }))
}
