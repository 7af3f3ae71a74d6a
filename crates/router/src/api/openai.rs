//! The OpenAI-compatible routes: thin wrappers over [`crate::proxy`].

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ApiError, AppState, RawBody};
use crate::forward_paths::check_path;
use crate::proxy::{Endpoint, ProxyError};

impl From<ProxyError> for ApiError {
    fn from(e: ProxyError) -> Self {
        match e {
            ProxyError::InvalidRequest(m) => ApiError::bad_request(m),
            ProxyError::UnknownModel(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "model_not_found", e.to_string())
            }
            // The detail names workers and their internal URLs: it goes to
            // the log (one warning per failed attempt), not to the client.
            ProxyError::NoWorker(detail) => {
                tracing::warn!(detail, "no worker could take the request");
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream_unavailable",
                    "no worker could take the request",
                )
            }
            ProxyError::Busy(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "tokenizer_busy",
                e.to_string(),
            ),
            ProxyError::Tokenize(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_prompt", e.to_string())
            }
            ProxyError::Overloaded(refusal) => ApiError::from(refusal),
            ProxyError::PromptTooLong { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "prompt_too_long",
                e.to_string(),
            ),
            ProxyError::Limited(refusal) => refusal.into_error(),
            ProxyError::State(s) => {
                let e = ApiError::from(s);
                if e.status.is_server_error() {
                    // Valkey's own error text (addresses, script names) stays in the log.
                    ApiError::new(e.status, e.kind, "the fleet's shared state is unavailable")
                } else {
                    e
                }
            }
        }
    }
}

async fn forward(
    app: AppState,
    endpoint: Endpoint,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if crate::hop::looped(&headers) {
        metrics::counter!("prefix_router_forwarding_loops_total").increment(1);
        return ApiError::new(
            StatusCode::LOOP_DETECTED,
            "forwarding_loop",
            "this request already passed through a router: a worker URL points at a router or its balancer",
        )
        .into_response();
    }
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    match app
        .proxy
        .handle(endpoint, &method, path, &headers, body)
        .await
    {
        Ok(resp) => resp,
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `POST /v1/completions`.
pub async fn completions(
    State(app): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Response {
    forward(app, Endpoint::Completions, method, uri, headers, body).await
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(app): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Response {
    forward(app, Endpoint::ChatCompletions, method, uri, headers, body).await
}

/// Any other `/v1/*` route vLLM serves (or the operator listed), forwarded
/// to a worker of the body's model. The raw path is checked first: nothing
/// the worker's URL parser would normalize out of `/v1/` is sent.
pub async fn other(
    State(app): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Response {
    if let Err(e) = check_path(uri.path()) {
        return ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", e.to_string())
            .into_response();
    }
    if !app.forward_paths.allows(uri.path()) {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such route: the router forwards vLLM's /v1 inference routes and --forward-path",
        )
        .into_response();
    }
    forward(app, Endpoint::Other, method, uri, headers, body).await
}

/// `GET /v1/models`: every model with at least one live worker.
pub async fn models(State(app): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let mut data = Vec::new();
    for model in app.store.models().await? {
        let workers = app.store.workers(&model).await?;
        if workers.iter().any(|w| w.status == "live") {
            data.push(json!({ "id": model, "object": "model", "created": 0, "owned_by": "prefix-router" }));
        }
    }
    Ok(Json(json!({ "object": "list", "data": data })))
}

/// The header that carries a client's own `Authorization` to explain
/// (whose own is the operator's token).
const CLIENT_AUTHORIZATION: &str = "x-client-authorization";

/// `POST /admin/explain`: the admission and routing decisions for a
/// request (its headers classify it; its API key goes in
/// `x-client-authorization`), without changing any state.
pub async fn explain(
    State(app): State<AppState>,
    mut headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Json<serde_json::Value>, ApiError> {
    // The operator's token is never taken for a client's key.
    headers.remove(axum::http::header::AUTHORIZATION);
    if let Some(client) = headers.remove(CLIENT_AUTHORIZATION) {
        headers.insert(axum::http::header::AUTHORIZATION, client);
    }
    Ok(Json(app.proxy.explain(&headers, &body).await?))
}
