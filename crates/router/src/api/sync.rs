//! The worker push API's anti-entropy: a destructive sync of a worker's
//! whole snapshot (in chunks), the digest check, and the repair of the
//! buckets a check found different.

use std::borrow::Cow;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::internal::{families, resolve_model};
use super::{ApiError, AppState, JsonBody};
use protocol::push::{SyncBody, SyncCheckBody, SyncCheckReply, SyncRepairBody, SyncReply};

/// Destructive sync: the worker's block set becomes exactly its snapshot.
pub async fn sync(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<SyncBody<'static>>,
) -> Result<Response, ApiError> {
    let model = resolve_model(&app, b.model.map(Cow::into_owned), &b.worker_id).await?;
    let store = &app.store;
    let fams = match families(b.families.as_deref(), b.active_hashes.len()) {
        Ok(f) => f,
        Err(e) => {
            // A refused chunk aborts its sync: its commit must not apply
            // the chunks before it alone.
            if let Some(sync_id) = &b.sync_id
                && let Err(abort) = store.sync_abort(&model, &b.worker_id, sync_id).await
            {
                tracing::debug!(error = %abort, "a refused sync was not aborted");
            }
            return Err(e);
        }
    };
    let tiers = b.tiers.as_deref();
    let Some(sync_id) = b.sync_id else {
        if !b.last {
            return Err(ApiError::bad_request("\"last\": false needs a sync_id"));
        }
        let out = store
            .sync_in_families(&model, &b.worker_id, &b.active_hashes, fams, tiers)
            .await?;
        let reply = SyncReply {
            sync_id: None,
            staged: None,
            active: Some(out.active),
        };
        return Ok(Json(reply).into_response());
    };
    let staged = store
        .sync_stage_in_families(
            &model,
            &b.worker_id,
            &sync_id,
            &b.active_hashes,
            fams,
            tiers,
        )
        .await?;
    if !b.last {
        let reply = SyncReply {
            sync_id: Some(sync_id.into_owned()),
            staged: Some(staged),
            active: None,
        };
        return Ok((StatusCode::ACCEPTED, Json(reply)).into_response());
    }
    let out = store.sync_commit(&model, &b.worker_id, &sync_id).await?;
    let reply = SyncReply {
        sync_id: Some(sync_id.into_owned()),
        staged: None,
        active: Some(out.active),
    };
    Ok(Json(reply).into_response())
}

/// The cheap half of anti-entropy: equal digests renew the worker's entries
/// without its snapshot; different ones name the buckets that differ.
pub async fn sync_check(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<SyncCheckBody<'static>>,
) -> Result<Json<SyncCheckReply>, ApiError> {
    let model = resolve_model(&app, b.model.map(Cow::into_owned), &b.worker_id).await?;
    check_digests(
        &app,
        &model,
        &b.worker_id,
        &b.digests,
        b.shard_digests.as_deref(),
    )
    .await
}

/// A sync of the buckets a check found different, then the check again.
pub async fn sync_repair(
    State(app): State<AppState>,
    JsonBody(b): JsonBody<SyncRepairBody<'static>>,
) -> Result<Json<SyncCheckReply>, ApiError> {
    let model = resolve_model(&app, b.model.map(Cow::into_owned), &b.worker_id).await?;
    let fams = families(b.families.as_deref(), b.hashes.len())?;
    let out = app
        .store
        .sync_repair(
            &model,
            &b.worker_id,
            &b.buckets,
            &b.hashes,
            fams,
            b.tiers.as_deref(),
        )
        .await?;
    tracing::debug!(
        worker_id = %b.worker_id,
        buckets = b.buckets.len(),
        added = out.added,
        removed = out.removed,
        retiered = out.retiered,
        "repaired"
    );
    check_digests(
        &app,
        &model,
        &b.worker_id,
        &b.digests,
        b.shard_digests.as_deref(),
    )
    .await
}

async fn check_digests(
    app: &AppState,
    model: &str,
    worker_id: &str,
    digests: &str,
    shard_digests: Option<&[String]>,
) -> Result<Json<SyncCheckReply>, ApiError> {
    let differing = match shard_digests {
        Some(per_shard) => {
            app.store
                .sync_check_shards(model, worker_id, per_shard)
                .await?
        }
        None => app.store.sync_check(model, worker_id, digests).await?,
    };
    Ok(Json(SyncCheckReply {
        unchanged: differing.is_none(),
        differing: differing.unwrap_or_default(),
    }))
}
