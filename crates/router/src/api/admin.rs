//! Operator routes: worker listing, health, readiness, metrics.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, AppState};
use protocol::check_name;

/// `?model=` filter of `GET /admin/workers`.
#[derive(Deserialize)]
pub struct WorkersQuery {
    model: Option<String>,
}

/// Every worker of every model (or of `?model=`): lease, load, block count.
pub async fn workers(
    State(app): State<AppState>,
    query: Result<Query<WorkersQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let models = match q.model {
        Some(m) => {
            check_name("model", &m)?;
            vec![m]
        }
        None => app.store.models().await?,
    };
    let mut all = Vec::new();
    for model in &models {
        all.extend(app.store.workers(model).await?);
    }
    Ok(Json(json!({ "workers": all })))
}

/// Liveness: the process serves HTTP.
pub async fn health() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Readiness: Valkey answers.
pub async fn ready(State(app): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    app.store.ping().await?;
    Ok(Json(json!({ "status": "ready" })))
}

/// Prometheus text exposition.
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    app.metrics.run_upkeep();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
