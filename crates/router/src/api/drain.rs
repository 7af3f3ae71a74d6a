//! Graceful drain by an operator (or a worker's preStop hook):
//! `POST /admin/workers/{id}/drain` marks the worker draining in the shared
//! state (every router stops routing to it; its answers still running are
//! moved at the deadline), `DELETE` clears the mark. Authenticated like
//! every `/admin/*` route.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};

use super::internal::resolve_model;
use super::{ApiError, AppState};
use protocol::parse_duration_or_zero;
use state::{MAX_DRAIN_DEADLINE, StateError};

/// The drain deadline when the call names none.
pub const DEFAULT_DRAIN_DEADLINE: Duration = Duration::from_secs(30);

/// `?model=` (else the model the worker registered with) and
/// `?deadline=` (a duration, 0 to 24 h; default 30 s).
#[derive(Deserialize)]
pub struct DrainQuery {
    model: Option<String>,
    deadline: Option<String>,
}

/// What a drain call did.
#[derive(Serialize)]
pub struct DrainReply {
    worker_id: String,
    model: String,
    draining: bool,
    /// Time left to the drain deadline, ms (absent once undrained).
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline_ms: Option<u64>,
}

/// Marks a worker draining; an earlier deadline already set stays.
pub async fn drain(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<DrainQuery>, QueryRejection>,
) -> Result<Json<DrainReply>, ApiError> {
    let (worker_id, model, deadline) = target(&app, path, query).await?;
    let deadline = deadline.unwrap_or(DEFAULT_DRAIN_DEADLINE);
    let Some(left) = app.store.drain(&model, &worker_id, deadline).await? else {
        return Err(StateError::UnknownWorker { worker_id, model }.into());
    };
    tracing::info!(worker_id, model, ?left, "worker draining");
    learn(&app, &model).await;
    Ok(Json(DrainReply {
        worker_id,
        model,
        draining: true,
        deadline_ms: Some(left.as_millis() as u64),
    }))
}

/// Clears a worker's drain mark: it is routed to again.
pub async fn undrain(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<DrainQuery>, QueryRejection>,
) -> Result<Json<DrainReply>, ApiError> {
    let (worker_id, model, _) = target(&app, path, query).await?;
    if !app.store.undrain(&model, &worker_id).await? {
        return Err(StateError::UnknownWorker { worker_id, model }.into());
    }
    tracing::info!(worker_id, model, "worker undrained");
    learn(&app, &model).await;
    Ok(Json(DrainReply {
        worker_id,
        model,
        draining: false,
        deadline_ms: None,
    }))
}

/// The worker, its model and the deadline asked for.
async fn target(
    app: &AppState,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<DrainQuery>, QueryRejection>,
) -> Result<(String, String, Option<Duration>), ApiError> {
    let Path(worker_id) = path.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let deadline = q
        .deadline
        .map(|d| parse_duration_or_zero(&d))
        .transpose()
        .map_err(|e| ApiError::bad_request(format!("deadline: {e}")))?;
    if let Some(d) = deadline
        && d > MAX_DRAIN_DEADLINE
    {
        return Err(ApiError::bad_request(format!(
            "deadline: at most {MAX_DRAIN_DEADLINE:?}, got {d:?}"
        )));
    }
    let model = resolve_model(app, q.model, &worker_id).await?;
    Ok((worker_id, model, deadline))
}

/// This router's relays learn the mark at once (the others at their next
/// refresh).
async fn learn(app: &AppState, model: &str) {
    if let Err(e) = app
        .proxy
        .drains()
        .refresh(&app.store, &[model.to_owned()])
        .await
    {
        tracing::warn!(error = %e, "drain marks not read back; the next refresh will");
    }
}
