//! The OpenAI routes, answered like vLLM's server but from the simulated
//! engine: the answer's timing, its `usage.prompt_tokens_details.
//! cached_tokens` and the `x-sim-cached-tokens` header come from the
//! engine; the text is `max_tokens` tokens of the sim's vocabulary, each
//! a function of the prompt and the tokens before it (greedy decoding:
//! [`Vocabulary`](crate::Vocabulary)); a list of prompts gets one choice
//! each. A prefill or decode
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
use super::config::StreamFaultKind;
use super::disagg::{Disagg, Producer, handoff_params, plan};
use super::error::SimError;
use super::metrics::{Sample, orca_header, render};
use super::prompt::{Kind, prepare};
use super::request::{RequestGuard, admit};
use super::responses::{Choice, Envelope, usage};
use super::stream::{Planned, breaks_at, crash, sse_body};
use crate::Admission;
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
    let max_tokens = prepared.max_tokens;
    let admitted = futures_util::future::try_join_all(
        prepared
            .prompts
            .iter()
            .map(|p| admit(&app.core, p, max_tokens, disagg.source())),
    )
    .await?;
    let Some(first_id) = admitted.first().map(|(g, _)| g.id()) else {
        return Err(internal("a request without prompts".into()));
    };
    let envelope = Envelope::new(&prepared, &app.worker_id, first_id.0);
    // Read now: the engine frees the blocks when the request ends.
    let block_ids = (disagg == Disagg::Handoff).then(|| {
        let st = app.core.lock();
        st.engine
            .cache()
            .block_ids(first_id)
            .map(<[usize]>::to_vec)
            .unwrap_or_default()
    });
    let admissions: Vec<Admission> = admitted.iter().map(|(_, a)| *a).collect();
    let mut out = HeaderMap::new();
    let cached: usize = admissions
        .iter()
        .map(|a| a.cached_tokens + a.cpu_tokens)
        .sum();
    out.insert(
        HeaderName::from_static(SIM_CACHED_TOKENS_HEADER),
        HeaderValue::from(cached),
    );
    if disagg == Disagg::Receive {
        let remote: usize = admissions.iter().map(|a| a.remote_tokens).sum();
        out.insert(
            HeaderName::from_static(SIM_REMOTE_TOKENS_HEADER),
            HeaderValue::from(remote),
        );
    }
    if let Ok(v) = HeaderValue::from_str(&app.worker_id) {
        out.insert(HeaderName::from_static(SIM_WORKER_HEADER), v);
    }
    let choices: Vec<(RequestGuard, Planned)> = admitted
        .into_iter()
        .zip(&prepared.prompts)
        .enumerate()
        .map(|(index, ((guard, admission), p))| {
            let tokens = app.vocabulary.answer(&p.tokens, admission.output_tokens);
            let plan = Planned {
                admission,
                index,
                prompt: Arc::clone(&p.tokens),
                tokens,
            };
            (guard, plan)
        })
        .collect();
    if prepared.stream {
        out.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        out.insert("cache-control", HeaderValue::from_static("no-cache"));
        let body = sse_body(
            Arc::clone(&app.core),
            app.vocabulary.clone(),
            envelope,
            choices,
            prepared.include_usage,
        );
        return Ok((out, Body::from_stream(body)).into_response());
    }
    if let Some(broken) = broken_answer(&app, &choices, out.clone()).await {
        return broken;
    }
    let done_at = admissions
        .iter()
        .map(|a| a.done_at)
        .max()
        .unwrap_or_default();
    tokio::time::sleep_until(app.core.instant(done_at)).await;
    app.core.wait_unpaused().await;
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
    let vocab = &app.vocabulary;
    let mut whole = Vec::with_capacity(choices.len());
    for (_, plan) in &choices {
        let text: String = plan.tokens.iter().map(|&t| vocab.text(t)).collect();
        let ids: Vec<u32> = plan.tokens.iter().map(|&t| vocab.id(t)).collect();
        let choice = Choice {
            index: plan.index,
            prompt: &plan.prompt,
        };
        whole.push((choice, text, ids));
    }
    let mut answer = envelope.full(&whole, usage(&admissions));
    drop(whole);
    for (guard, _) in choices {
        guard.finish();
    }
    if let Some(block_ids) = block_ids {
        let producer = Producer {
            engine_id: &app.worker_id,
            request_id: &envelope.id,
            host: app.addr.ip().to_string(),
            port: app.addr.port(),
        };
        let first = admissions.first().copied();
        if let Some(first) = first {
            answer["kv_transfer_params"] =
                handoff_params(&producer, &prepared, &first, &block_ids, app.block_size);
        }
        app.core.lock().stats.handoffs += 1;
    }
    Ok((out, Json(answer)).into_response())
}

/// A non-streamed answer that a [`StreamFault`](super::config::StreamFault)
/// breaks: at the time of the token where it breaks, the connection is cut
/// (a body that fails), a 500 is answered, or the process exits.
async fn broken_answer(
    app: &App,
    choices: &[(RequestGuard, Planned)],
    out: HeaderMap,
) -> Option<Result<Response, SimError>> {
    let fault = app.core.stream_fault()?;
    let (_, plan) = choices
        .iter()
        .find(|(_, p)| breaks_at(Some(fault), fault.after_tokens, p.tokens.len()).is_some())?;
    tokio::time::sleep_until(
        app.core
            .instant(plan.admission.token_at(fault.after_tokens)),
    )
    .await;
    Some(match fault.kind {
        StreamFaultKind::Crash => crash(),
        StreamFaultKind::Error => Err(internal("the engine failed (simulated)".into())),
        StreamFaultKind::Cut => {
            let cut = futures_util::stream::once(async {
                Err::<Bytes, _>(std::io::Error::other("stream cut (simulated fault)"))
            });
            Ok((out, Body::from_stream(cut)).into_response())
        }
    })
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
