//! The worker push API: heartbeats, stored blocks, evictions (one flush of
//! both in one `events` request, or one request each), drain. Syncs
//! (anti-entropy) are in `sync`.

use std::borrow::Cow;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::{ApiError, AppState, JsonBody};
use protocol::check_name;
use protocol::push::{
    DeregisterReply, EventKind, EventsBody, EventsReply, EvictionBody, EvictionReply,
    HeartbeatBody, HeartbeatReply, StoredBody, StoredReply,
};
use state::{BlockEvent, StateError, WorkerHeartbeat};

/// `?model=` on routes without a body.
#[derive(Deserialize)]
pub struct ModelQuery {
    pub(super) model: Option<String>,
}

/// The model a report is for: the body's, else the one the worker registered
/// with, else the router's configured model.
pub(super) async fn resolve_model(
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
    protocol::check_worker_url(url).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// A body's `families`, which must list one entry per block.
pub(super) fn families(
    families: Option<&[Option<protocol::BlockHash>]>,
    blocks: usize,
) -> Result<Option<&[Option<protocol::BlockHash>]>, ApiError> {
    match families {
        Some(f) if f.len() != blocks => Err(ApiError::bad_request(format!(
            "\"families\" has {} entries for {blocks} blocks",
            f.len()
        ))),
        other => Ok(other),
    }
}

/// Registers a worker or renews its lease; returns the lease length.
pub async fn heartbeat(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<HeartbeatBody<'static>>,
) -> Result<Json<HeartbeatReply>, ApiError> {
    renew(&app, b).await.map(Json)
}

/// A heartbeat, on its own or carried by an `events` request.
async fn renew(app: &AppState, b: HeartbeatBody<'static>) -> Result<HeartbeatReply, ApiError> {
    check_url(&b.url)?;
    if crate::hop::is_own_listener(&b.url, &app.listeners) {
        return Err(ApiError::bad_request(format!(
            "url {:?} is one of this router's own listeners: requests would loop",
            protocol::redact_url(&b.url)
        )));
    }
    let model = resolve_model(app, b.model.map(Cow::into_owned), &b.worker_id).await?;
    let sharding = app.store.sharding();
    if let Some(depth) = b.family_blocks
        && sharding.shards > 1
        && depth != sharding.family_blocks
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "family_blocks_mismatch",
            format!(
                "the worker computes families over {depth} blocks, this fleet over {}: \
                 set the same --family-blocks on both",
                sharding.family_blocks
            ),
        ));
    }
    let hb = WorkerHeartbeat {
        worker_id: b.worker_id.into_owned(),
        url: b.url.into_owned(),
        load: b.load,
    };
    // A pushed heartbeat always says the role: absent is both, so a worker
    // restarted without its role stops being routed as one at once.
    let role = b.role.unwrap_or_default();
    let lease = app.store.heartbeat_as(&model, &hb, Some(role)).await?;
    if lease.new {
        let url = protocol::redact_url(&hb.url);
        tracing::info!(worker_id = %hb.worker_id, model, url, %role, incarnation = lease.incarnation, "worker registered");
    }
    Ok(HeartbeatReply {
        worker_id: hb.worker_id,
        model,
        lease_ms: lease.lease_ms,
        incarnation: lease.incarnation,
        registered: lease.new,
        shards: (sharding.shards > 1).then_some(sharding.shards),
    })
}

/// Confirms blocks the worker now caches.
pub async fn stored(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<StoredBody<'static>>,
) -> Result<Json<StoredReply>, ApiError> {
    let model = resolve_model(&app, b.model.map(Cow::into_owned), &b.worker_id).await?;
    let out = app
        .store
        .stored_in_families(
            &model,
            &b.worker_id,
            &b.block_hashes,
            families(b.families.as_deref(), b.block_hashes.len())?,
            b.medium.unwrap_or_default(),
        )
        .await?;
    Ok(Json(StoredReply {
        inserted: out.inserted,
        promoted: out.promoted,
        refreshed: out.refreshed,
    }))
}

/// Removes blocks the worker evicted (the batched fast path).
pub async fn eviction(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<EvictionBody<'static>>,
) -> Result<Json<EvictionReply>, ApiError> {
    let model = resolve_model(&app, b.model.map(Cow::into_owned), &b.worker_id).await?;
    let removed = app
        .store
        .evict_in_families(
            &model,
            &b.worker_id,
            &b.evicted_hashes,
            families(b.families.as_deref(), b.evicted_hashes.len())?,
        )
        .await?;
    Ok(Json(EvictionReply { removed }))
}

/// One flush's stored and evicted blocks, applied in the worker's order
/// (each event as `stored` or `eviction` would), after the heartbeat it
/// carries, if any. The body is checked before anything is written.
pub async fn events(
    State(app): State<AppState>,
    JsonBody(mut b): JsonBody<EventsBody<'static>>,
) -> Result<Json<EventsReply>, ApiError> {
    let carried = b.heartbeat.take();
    if let Some(hb) = &carried
        && (hb.worker_id != b.worker_id || hb.model != b.model)
    {
        return Err(ApiError::bad_request(
            "the heartbeat an events body carries names its worker_id and model",
        ));
    }
    let mut events = Vec::with_capacity(b.events.len());
    for (i, e) in b.events.iter().enumerate() {
        let stored_on = match (e.kind, e.medium) {
            (EventKind::Stored, medium) => Some(medium.unwrap_or_default()),
            (EventKind::Evicted, None) => None,
            (EventKind::Evicted, Some(_)) => {
                return Err(ApiError::bad_request(format!(
                    "events[{i}]: an evicted event takes no \"medium\""
                )));
            }
        };
        let families =
            families(e.families.as_deref(), e.block_hashes.len()).map_err(|mut err| {
                err.message = format!("events[{i}]: {}", err.message);
                err
            })?;
        events.push(BlockEvent {
            stored_on,
            hashes: &e.block_hashes,
            families,
        });
    }
    // The heartbeat first: it may register the worker the events are for
    // (once the events' own limit is known to hold).
    let total: usize = events.iter().map(|e| e.hashes.len()).sum();
    if carried.is_some() && total > app.store.limits().max_batch_hashes {
        return Err(StateError::Invalid {
            what: "block_hashes",
            detail: format!(
                "{total} hashes in one batch; at most {}",
                app.store.limits().max_batch_hashes
            ),
        }
        .into());
    }
    let (model, heartbeat) = match carried {
        Some(hb) => {
            let reply = renew(&app, hb).await?;
            (reply.model.clone(), Some(reply))
        }
        None => {
            let given = b.model.clone().map(Cow::into_owned);
            (resolve_model(&app, given, &b.worker_id).await?, None)
        }
    };
    let out = app
        .store
        .apply_events(&model, &b.worker_id, &events)
        .await?;
    Ok(Json(EventsReply {
        inserted: out.stored.inserted,
        promoted: out.stored.promoted,
        refreshed: out.stored.refreshed,
        removed: out.removed,
        heartbeat,
    }))
}

/// Drains a worker: out of routing now, its entries purged in the background.
pub async fn deregister(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ModelQuery>, QueryRejection>,
) -> Result<Json<DeregisterReply>, ApiError> {
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
            match store.purge(&purge_model).await {
                Ok((_, 0)) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "background purge stopped; gc will finish it");
                    break;
                }
            }
        }
    });
    Ok(Json(DeregisterReply {
        worker_id,
        model,
        deregistered: true,
    }))
}
