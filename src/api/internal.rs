//! The worker push API: heartbeats, stored blocks, evictions, syncs, drain.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, AppState, JsonBody};
use crate::hashing::BlockHash;
use crate::state::{StateError, WorkerHeartbeat, WorkerLoad, check_name};

/// `POST /internal/heartbeat`.
#[derive(Deserialize)]
pub struct HeartbeatBody {
    worker_id: String,
    url: String,
    model: Option<String>,
    load: Option<LoadBody>,
}

#[derive(Deserialize)]
struct LoadBody {
    #[serde(default)]
    num_requests_waiting: u64,
    #[serde(default)]
    num_requests_running: u64,
    #[serde(default)]
    kv_cache_usage_perc: f64,
}

/// `POST /internal/stored`.
#[derive(Deserialize)]
pub struct StoredBody {
    worker_id: String,
    model: Option<String>,
    block_hashes: Vec<BlockHash>,
}

/// `POST /internal/eviction`.
#[derive(Deserialize)]
pub struct EvictionBody {
    worker_id: String,
    model: Option<String>,
    evicted_hashes: Vec<BlockHash>,
}

/// `POST /internal/sync`: a full snapshot, or one chunk of it when
/// `sync_id` is given (`"last": false` on every chunk but the last).
#[derive(Deserialize)]
pub struct SyncBody {
    worker_id: String,
    model: Option<String>,
    active_hashes: Vec<BlockHash>,
    sync_id: Option<String>,
    #[serde(default = "yes")]
    last: bool,
}

fn yes() -> bool {
    true
}

/// `?model=` on routes without a body.
#[derive(Deserialize)]
pub struct ModelQuery {
    model: Option<String>,
}

/// The model a report is for: the body's, else the one the worker registered
/// with, else the router's configured model.
async fn resolve_model(
    app: &AppState,
    given: Option<String>,
    worker_id: &str,
) -> Result<String, ApiError> {
    check_name("worker_id", worker_id)?;
    if let Some(m) = given {
        check_name("model", &m)?;
        return Ok(m);
    }
    if let Some(m) = app.store.worker_model(worker_id).await? {
        return Ok(m);
    }
    app.default_model.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_worker",
            format!("worker {worker_id:?} is not registered and the request names no model"),
        )
    })
}

fn check_url(url: &str) -> Result<(), ApiError> {
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() > "http://".len()
        && url.len() <= 2048
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "url must be an http:// or https:// URL of at most 2048 characters",
        ))
    }
}

/// Registers a worker or renews its lease; returns the lease length.
pub async fn heartbeat(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<HeartbeatBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    check_url(&b.url)?;
    let model = resolve_model(&app, b.model, &b.worker_id).await?;
    let load = b.load.map(|l| WorkerLoad {
        num_requests_waiting: l.num_requests_waiting,
        num_requests_running: l.num_requests_running,
        kv_cache_usage_perc: l.kv_cache_usage_perc,
    });
    let hb = WorkerHeartbeat {
        worker_id: b.worker_id,
        url: b.url,
        load,
    };
    let lease = app.store.heartbeat(&model, &hb).await?;
    if lease.new {
        let url = crate::config::redact_url(&hb.url);
        tracing::info!(worker_id = %hb.worker_id, model, url, incarnation = lease.incarnation, "worker registered");
    }
    Ok(Json(json!({
        "worker_id": hb.worker_id,
        "model": model,
        "lease_ms": lease.lease_ms,
        "incarnation": lease.incarnation,
        "registered": lease.new,
    })))
}

/// Confirms blocks the worker now caches.
pub async fn stored(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<StoredBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let model = resolve_model(&app, b.model, &b.worker_id).await?;
    let out = app
        .store
        .stored(&model, &b.worker_id, &b.block_hashes)
        .await?;
    Ok(Json(json!({
        "inserted": out.inserted, "promoted": out.promoted, "refreshed": out.refreshed,
    })))
}

/// Removes blocks the worker evicted (the batched fast path).
pub async fn eviction(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<EvictionBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let model = resolve_model(&app, b.model, &b.worker_id).await?;
    let removed = app
        .store
        .evict(&model, &b.worker_id, &b.evicted_hashes)
        .await?;
    Ok(Json(json!({ "removed": removed })))
}

/// Destructive sync: the worker's block set becomes exactly its snapshot.
pub async fn sync(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<SyncBody>,
) -> Result<Response, ApiError> {
    let model = resolve_model(&app, b.model, &b.worker_id).await?;
    let store = &app.store;
    let Some(sync_id) = b.sync_id else {
        if !b.last {
            return Err(ApiError::bad_request("\"last\": false needs a sync_id"));
        }
        let out = store.sync(&model, &b.worker_id, &b.active_hashes).await?;
        return Ok(Json(json!({ "active": out.active })).into_response());
    };
    let staged = store
        .sync_stage(&model, &b.worker_id, &sync_id, &b.active_hashes)
        .await?;
    if !b.last {
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "sync_id": sync_id, "staged": staged })),
        )
            .into_response());
    }
    let out = store.sync_commit(&model, &b.worker_id, &sync_id).await?;
    Ok(Json(json!({ "sync_id": sync_id, "active": out.active })).into_response())
}

/// Drains a worker: out of routing now, its entries purged in the background.
pub async fn deregister(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ModelQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Path(worker_id) = path.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let model = resolve_model(&app, q.model, &worker_id).await?;
    if !app.store.deregister(&model, &worker_id).await? {
        return Err(StateError::UnknownWorker { worker_id, model }.into());
    }
    tracing::info!(worker_id, model, "worker deregistered; purging its entries");
    let store = app.store.clone();
    let purge_model = model.clone();
    tokio::spawn(async move {
        loop {
            match store.purge_step(&purge_model).await {
                Ok((_, 0)) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "background purge stopped; gc will finish it");
                    break;
                }
            }
        }
    });
    Ok(Json(
        json!({ "worker_id": worker_id, "model": model, "deregistered": true }),
    ))
}
