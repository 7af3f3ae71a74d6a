//! [`App`]: what every handler shares, and the HTTP routes.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;

use super::core::SimCore;
use super::{admin, handlers, render};
use protocol::WorkerRole;
use tokenize::ModelPipeline;

/// The state behind every route.
pub struct App {
    /// The engine and its clock.
    pub core: Arc<SimCore>,
    /// Prompt to ids to block hashes, as the router does it.
    pub pipeline: ModelPipeline,
    /// The worker's id (`x-sim-worker`).
    pub worker_id: String,
    /// The served model name.
    pub model: String,
    /// The tokens answers are made of.
    pub vocabulary: crate::Vocabulary,
    /// Output tokens when a request names none.
    pub default_max_tokens: usize,
    /// Appended to `/metrics` (the process's own metrics, the pusher's).
    pub metrics: Option<PrometheusHandle>,
    /// The KV-event PUB and replay endpoints, when publishing.
    pub kv_endpoints: Option<(String, Option<String>)>,
    /// `max_model_len` shown by `/v1/models`: the pool's tokens.
    pub max_model_len: usize,
    /// Its prefill/decode role (`disagg`).
    pub role: WorkerRole,
    /// The bound HTTP address, named in a prefill's handoff params.
    pub addr: SocketAddr,
    /// Tokens per block.
    pub block_size: usize,
}

/// The routes: vLLM's OpenAI API and probes (held while paused), and the
/// simulation's own `/sim/*` controls (always answered).
pub fn router(app: Arc<App>) -> Router {
    let served = Router::new()
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/v1/completions/render", post(render::completions_render))
        .route("/v1/chat/completions/render", post(render::chat_render))
        .route("/tokenize", post(render::tokenize))
        .route("/v1/models", get(handlers::models))
        .route("/health", get(handlers::health))
        .route("/metrics", get(handlers::metrics))
        .route("/reset_prefix_cache", post(admin::reset_prefix_cache))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            hold_while_paused,
        ));
    let controls = Router::new()
        .route("/sim/faults", get(admin::faults).post(admin::set_faults))
        .route("/sim/reset_prefix_cache", post(admin::reset_prefix_cache))
        .route("/sim/resync", post(admin::resync))
        .route("/sim/state", get(admin::state));
    served.merge(controls).with_state(app)
}

/// A paused worker answers nothing: requests wait here until it resumes.
async fn hold_while_paused(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    app.core.wait_unpaused().await;
    next.run(req).await
}
