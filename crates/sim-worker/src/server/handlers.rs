//! The OpenAI routes, answered like vLLM's server but from the simulated
//! engine: the answer's timing, its `usage.prompt_tokens_details.
//! cached_tokens` and the `x-sim-cached-tokens` header come from the
//! engine; the text is `max_tokens` filler tokens. A prefill or decode
//! worker's half of a disaggregated request is decided by `disagg`.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;

use super::app::App;
use super::disagg::{Disagg, Producer, handoff_params, plan};
use super::error::SimError;
use super::metrics::{Sample, orca_header, render};
use super::prompt::{Kind, prepare};
use super::request::admit;
use super::responses::Envelope;
use super::stream::sse_body;
use protocol::headers::{
    ORCA_REQUEST_HEADER, ORCA_RESPONSE_HEADER, SIM_CACHED_TOKENS_HEADER, SIM_REMOTE_TOKENS_HEADER,
    SIM_WORKER_HEADER,
};

/// `POST /v1/completions`.
pub async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(app, Kind::Completions, headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(app, Kind::Chat, headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn answer(
    app: Arc<App>,
    kind: Kind,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, SimError> {
    let tokenizing = Arc::clone(&app);
    let prepared = tokio::task::spawn_blocking(move || {
        prepare(
            kind,
            &body,
            &tokenizing.pipeline,
            &tokenizing.model,
            tokenizing.default_max_tokens,
        )
    })
    .await
    .map_err(|e| internal(format!("tokenizing task failed: {e}")))??;
    let disagg = plan(app.role, &prepared)?;
    let (guard, admission) = admit(&app.core, &prepared, disagg.source()).await?;
    let envelope = Envelope::new(&prepared, &app.worker_id, guard.id().0);
    // Read now: the engine frees the blocks when the request ends.
    let block_ids = (disagg == Disagg::Handoff).then(|| {
        let st = app.core.lock();
        st.engine
            .cache()
            .block_ids(guard.id())
            .map(<[usize]>::to_vec)
            .unwrap_or_default()
    });
    let mut out = HeaderMap::new();
    out.insert(
        HeaderName::from_static(SIM_CACHED_TOKENS_HEADER),
        HeaderValue::from(admission.cached_tokens + admission.cpu_tokens),
    );
    if disagg == Disagg::Receive {
        out.insert(
            HeaderName::from_static(SIM_REMOTE_TOKENS_HEADER),
            HeaderValue::from(admission.remote_tokens),
        );
    }
    if let Ok(v) = HeaderValue::from_str(&app.worker_id) {
        out.insert(HeaderName::from_static(SIM_WORKER_HEADER), v);
    }
    if prepared.stream {
        out.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        out.insert("cache-control", HeaderValue::from_static("no-cache"));
        let body = sse_body(
            Arc::clone(&app.core),
            guard,
            admission,
            envelope,
            prepared.include_usage,
            Arc::clone(&app.filler),
        );
        return Ok((out, Body::from_stream(body)).into_response());
    }
    tokio::time::sleep_until(app.core.instant(admission.done_at)).await;
    app.core.wait_unpaused().await;
    guard.finish();
    // vLLM answers the ORCA request header on non-streamed responses only.
    if let Some(format) = headers
        .get(ORCA_REQUEST_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        let gauges = app.core.lock_now().engine.gauges();
        if let Some(v) = orca_header(format, &gauges).and_then(|h| HeaderValue::from_str(&h).ok()) {
            out.insert(HeaderName::from_static(ORCA_RESPONSE_HEADER), v);
        }
    }
    let text = app.filler.repeat(admission.output_tokens);
    let mut answer = envelope.full(&admission, &text);
    if let Some(block_ids) = block_ids {
        let producer = Producer {
            engine_id: &app.worker_id,
            request_id: &envelope.id,
            host: app.addr.ip().to_string(),
            port: app.addr.port(),
        };
        answer["kv_transfer_params"] =
            handoff_params(&producer, &prepared, &admission, &block_ids, app.block_size);
        app.core.lock().stats.handoffs += 1;
    }
    Ok((out, Json(answer)).into_response())
}

fn internal(message: String) -> SimError {
    SimError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalServerError",
        message,
    )
}

/// `GET /v1/models`: the one served model.
pub async fn models(State(app): State<Arc<App>>) -> Json<serde_json::Value> {
    Json(json!({
        "object": "list",
        "data": [{
            "id": app.model,
            "object": "model",
            "created": 0,
            "owned_by": "vllm",
            "root": app.model,
            "parent": null,
            "max_model_len": app.max_model_len,
        }],
    }))
}

/// `GET /health`: 200 with an empty body, like vLLM.
pub async fn health() -> StatusCode {
    StatusCode::OK
}

/// `GET /metrics`: vLLM's gauges and counters, then the process's own.
pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    let sample = {
        let st = app.core.lock_now();
        Sample {
            gauges: st.engine.gauges(),
            counters: st.engine.counters(),
            stats: st.stats,
            cache: st.engine.cache().stats(),
            role: app.role,
        }
    };
    let mut text = render(&app.model, &sample);
    if let Some(handle) = &app.metrics {
        handle.run_upkeep();
        text.push_str(&handle.render());
    }
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}
