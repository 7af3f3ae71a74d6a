//! The HTTP API: thin handlers over [`crate::state`].

mod admin;
mod auth;
mod error;
mod internal;
mod json;
mod openai;

pub use auth::InternalAuth;
pub use error::ApiError;
pub use json::JsonBody;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{any, delete, get, post};
use metrics_exporter_prometheus::PrometheusHandle;

use std::sync::Arc;

use crate::proxy::Proxy;
use crate::state::StateStore;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The shared state.
    pub store: StateStore,
    /// The model assumed when a worker report names none and the worker is
    /// not registered (the `--model` of static workers).
    pub default_model: Option<String>,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// The routing path of the OpenAI routes.
    pub proxy: Arc<Proxy>,
}

/// The router's HTTP routes. `max_body_bytes` caps every request body.
pub fn router(app: AppState, auth: InternalAuth, max_body_bytes: usize) -> Router {
    let guarded = Router::new()
        .route("/internal/heartbeat", post(internal::heartbeat))
        .route("/internal/stored", post(internal::stored))
        .route("/internal/eviction", post(internal::eviction))
        .route("/internal/sync", post(internal::sync))
        .route(
            "/internal/workers/{worker_id}",
            delete(internal::deregister),
        )
        .route("/admin/workers", get(admin::workers))
        .route("/admin/explain", post(openai::explain))
        .route_layer(middleware::from_fn_with_state(auth, auth::require_token));
    Router::new()
        .merge(guarded)
        .route("/v1/completions", post(openai::completions))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/models", get(openai::models))
        .route("/v1/{*rest}", any(openai::other))
        .route("/health", get(admin::health))
        .route("/ready", get(admin::ready))
        .route("/metrics", get(admin::metrics))
        .fallback(not_found)
        .layer(middleware::from_fn(count_requests))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(app)
}

async fn not_found() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        "no such route",
    )
}

async fn count_requests(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("prefix_router_http_requests_total", "route" => route, "status" => status)
        .increment(1);
    response
}
