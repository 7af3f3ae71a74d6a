//! The HTTP API: thin handlers over [`state`].

mod admin;
mod auth;
mod conn;
mod drain;
mod internal;
mod json;
mod openai;
mod sync;

pub use auth::InternalAuth;
pub use conn::{ConnGuard, ConnLimits, GuardedListener};
pub use json::{JsonBody, RawBody};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{any, delete, get, post};
use axum::{Extension, Router};
use metrics_exporter_prometheus::PrometheusHandle;

use std::sync::Arc;
use std::time::Duration;

use crate::error::ApiError;
use crate::forward_paths::ForwardPaths;
use crate::proxy::Proxy;
use state::StateStore;

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
    /// The `/v1/*` paths forwarded besides the hashed routes.
    pub forward_paths: Arc<ForwardPaths>,
    /// This router's own listeners: never a worker's URL.
    pub listeners: Arc<Vec<std::net::SocketAddr>>,
}

/// Which routes a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// Every route, on one listener (no `--internal-listen`).
    All,
    /// The public listener when `--internal-listen` is set: the OpenAI
    /// routes and the health probes. `/internal/*`, `/admin/*` and
    /// `/metrics` answer 404 there.
    Public,
    /// The internal listener: the worker push API, the operator routes,
    /// `/metrics` and the health probes.
    Internal,
}

/// Limits on what a client sends.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Largest request body (413 above).
    pub max_body_bytes: usize,
    /// Deadline of a request body (408 past it); the head's deadline is
    /// kept by [`GuardedListener`].
    pub client_timeout: Duration,
}

/// The router's HTTP routes for one listener. Every request body is capped
/// by `limits`; every error, including an unknown route (404) and a wrong
/// method (405), is a JSON [`ApiError`].
pub fn router(app: AppState, auth: InternalAuth, limits: HttpLimits, surface: Surface) -> Router {
    let mut routes = Router::new()
        .route("/health", get(admin::health))
        .route("/ready", get(admin::ready));
    if surface != Surface::Public {
        let guarded = Router::new()
            .route("/internal/heartbeat", post(internal::heartbeat))
            .route("/internal/stored", post(internal::stored))
            .route("/internal/eviction", post(internal::eviction))
            .route("/internal/events", post(internal::events))
            .route("/internal/sync", post(sync::sync))
            .route("/internal/sync/check", post(sync::sync_check))
            .route("/internal/sync/repair", post(sync::sync_repair))
            .route(
                "/internal/workers/{worker_id}",
                delete(internal::deregister),
            )
            .route("/admin/workers", get(admin::workers))
            .route(
                "/admin/workers/{worker_id}/drain",
                post(drain::drain).delete(drain::undrain),
            )
            .route("/admin/explain", post(openai::explain))
            .route_layer(middleware::from_fn_with_state(auth, auth::require_token));
        routes = routes.merge(guarded).route("/metrics", get(admin::metrics));
    }
    if surface != Surface::Internal {
        routes = routes
            .route("/v1/completions", post(openai::completions))
            .route("/v1/chat/completions", post(openai::chat_completions))
            .route("/v1/models", get(openai::models))
            .route("/v1/{*rest}", any(openai::other));
    }
    routes
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(middleware::from_fn(count_requests))
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(Extension(json::ClientTimeout(limits.client_timeout)))
        .layer(middleware::from_fn(conn::mark_serving))
        .with_state(app)
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take this method",
    )
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
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
