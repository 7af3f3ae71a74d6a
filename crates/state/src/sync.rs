//! Destructive anti-entropy sync: a worker's block set becomes exactly its
//! snapshot, staged in chunks and swapped in atomically.

use rand::Rng;

use super::ttl::ms;
use super::{
    Lane, ScriptName, StateError, StateStore, check_name, chunks_or_empty, hex_args, unknown_worker,
};
use protocol::Tier;
use protocol::hashing::BlockHash;

use std::collections::HashMap;

/// The blocks of a snapshot held off the GPU, with their tier (most are on
/// the GPU: only these are looked up per staged chunk).
pub(crate) fn lower_tiers(
    hashes: &[BlockHash],
    tiers: Option<&[Tier]>,
) -> Result<HashMap<BlockHash, Tier>, StateError> {
    let Some(tiers) = tiers else {
        return Ok(HashMap::new());
    };
    if tiers.len() != hashes.len() {
        return Err(StateError::Invalid {
            what: "tiers",
            detail: format!("{} tiers for {} hashes", tiers.len(), hashes.len()),
        });
    }
    Ok(hashes
        .iter()
        .zip(tiers)
        .filter(|(_, t)| **t != Tier::Gpu)
        .map(|(h, t)| (*h, *t))
        .collect())
}

/// `sync_stage.lua`'s tiers argument for `chunk`: one entry kind per hash,
/// or empty when all are on the GPU.
fn stage_tiers(chunk: &[BlockHash], lower: &HashMap<BlockHash, Tier>) -> String {
    if lower.is_empty() || !chunk.iter().any(|h| lower.contains_key(h)) {
        return String::new();
    }
    chunk
        .iter()
        .map(|h| super::blocks::tier_arg(lower.get(h).copied().unwrap_or_default()))
        .collect()
}

/// The result of a committed sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Blocks the worker holds after the sync (its snapshot, plus routed
    /// requests' speculative blocks that the snapshot predates).
    pub active: u64,
}

/// Checks a caller-chosen sync id: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn check_sync_id(sync_id: &str) -> Result<(), StateError> {
    let ok = !sync_id.is_empty()
        && sync_id.len() <= 64
        && sync_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(StateError::Invalid {
            what: "sync_id",
            detail: "must be 1 to 64 characters of [A-Za-z0-9_-]".into(),
        })
    }
}

impl StateStore {
    /// Replaces `worker_id`'s block set by `hashes` (all on the GPU) in one
    /// consistent step, however long the list.
    pub async fn sync(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
    ) -> Result<SyncOutcome, StateError> {
        self.sync_in_families(model, worker_id, hashes, None, None)
            .await
    }

    /// [`sync`](Self::sync) with each block's family (`protocol::family`):
    /// each part of the model gets its blocks only; and with each block's
    /// tier (None: all on the GPU): every entry the sync leaves has the
    /// tier the snapshot gives it.
    pub async fn sync_in_families(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
        families: Option<&[Option<BlockHash>]>,
        tiers: Option<&[Tier]>,
    ) -> Result<SyncOutcome, StateError> {
        let sync_id = format!("{:016x}", rand::rng().random::<u64>());
        self.sync_stage_in_families(model, worker_id, &sync_id, hashes, families, tiers)
            .await?;
        self.sync_commit(model, worker_id, &sync_id).await
    }

    /// Adds a chunk of a snapshot to sync `sync_id`; nothing is visible until
    /// [`StateStore::sync_commit`]. Returns the number of hashes staged so far.
    pub async fn sync_stage(
        &self,
        model: &str,
        worker_id: &str,
        sync_id: &str,
        hashes: &[BlockHash],
    ) -> Result<u64, StateError> {
        self.sync_stage_in_families(model, worker_id, sync_id, hashes, None, None)
            .await
    }

    /// [`sync_stage`](Self::sync_stage) with each block's family: each part
    /// stages its blocks (a part with none stages nothing: its commit then
    /// empties it). Returns the hashes staged so far over all parts. A
    /// chunk refused ([`StateError::Invalid`]: too many hashes, tiers not
    /// matching them) aborts the sync on every part
    /// ([`sync_abort`](Self::sync_abort)).
    pub async fn sync_stage_in_families(
        &self,
        model: &str,
        worker_id: &str,
        sync_id: &str,
        hashes: &[BlockHash],
        families: Option<&[Option<BlockHash>]>,
        tiers: Option<&[Tier]>,
    ) -> Result<u64, StateError> {
        let staged = self
            .stage_chunk(model, worker_id, sync_id, hashes, families, tiers)
            .await;
        if let Err(StateError::Invalid { .. }) = &staged
            && check_sync_id(sync_id).is_ok()
            && let Err(e) = self.sync_abort(model, worker_id, sync_id).await
        {
            tracing::warn!(model, worker_id, sync_id, error = %e, "a refused sync was not aborted");
        }
        staged
    }

    /// Aborts staged sync `sync_id` on every part of `model`: what was
    /// staged is dropped, and its later chunks and its commit are refused
    /// with [`StateError::SyncAborted`] until the stage would have expired.
    /// A sync the worker already committed is left alone.
    pub async fn sync_abort(
        &self,
        model: &str,
        worker_id: &str,
        sync_id: &str,
    ) -> Result<(), StateError> {
        check_name("worker_id", worker_id)?;
        check_sync_id(sync_id)?;
        let ttl = ms(self.ttls().sync_stage);
        for part in self.parts(model)?.iter() {
            let _: u8 = self
                .run(
                    Lane::Bulk,
                    ScriptName::SyncAbort,
                    part,
                    &[worker_id, sync_id, &ttl],
                )
                .await
                .map_err(|e| unknown_worker(e, model, worker_id))?;
        }
        Ok(())
    }

    async fn stage_chunk(
        &self,
        model: &str,
        worker_id: &str,
        sync_id: &str,
        hashes: &[BlockHash],
        families: Option<&[Option<BlockHash>]>,
        tiers: Option<&[Tier]>,
    ) -> Result<u64, StateError> {
        let parts = self.parts(model)?;
        let lower = lower_tiers(hashes, tiers)?;
        if parts.len() == 1 {
            return self
                .sync_stage_part(&parts[0], worker_id, sync_id, hashes, &lower)
                .await;
        }
        check_name("worker_id", worker_id)?;
        check_sync_id(sync_id)?;
        let mut staged = 0;
        for (s, blocks) in self.split(parts.len(), hashes, families) {
            if !blocks.is_empty() {
                staged += self
                    .sync_stage_part(&parts[s], worker_id, sync_id, &blocks, &lower)
                    .await?;
            }
        }
        Ok(staged)
    }

    async fn sync_stage_part(
        &self,
        model: &str,
        worker_id: &str,
        sync_id: &str,
        hashes: &[BlockHash],
        lower: &HashMap<BlockHash, Tier>,
    ) -> Result<u64, StateError> {
        check_name("worker_id", worker_id)?;
        check_sync_id(sync_id)?;
        let max = self.limits().max_sync_hashes;
        if hashes.len() > max {
            return Err(too_large(hashes.len(), max));
        }
        let (ttl, max_s) = (ms(self.ttls().sync_stage), max.to_string());
        let mut staged = 0;
        for chunk in chunks_or_empty(hashes, self.limits().stage_per_call) {
            let hex = hex_args(chunk);
            let kinds = stage_tiers(chunk, lower);
            let mut args = vec![worker_id, sync_id, &ttl, &max_s, &kinds];
            args.extend(hex.iter().map(String::as_str));
            staged = self
                .run(Lane::Bulk, ScriptName::SyncStage, model, &args)
                .await
                .map_err(
                    |e| match aborted(unknown_worker(e, model, worker_id), sync_id) {
                        StateError::Script { detail, .. } if detail.contains("sync too large") => {
                            too_large(max + 1, max)
                        }
                        other => other,
                    },
                )?;
        }
        Ok(staged)
    }

    /// Makes staged sync `sync_id` the worker's block set, then brings the
    /// maps in line with it. Lookups see the new set from the commit on
    /// (part by part on a sharded model). `active` sums the parts.
    pub async fn sync_commit(
        &self,
        model: &str,
        worker_id: &str,
        sync_id: &str,
    ) -> Result<SyncOutcome, StateError> {
        let parts = self.parts(model)?;
        let mut active = 0;
        for part in parts.iter() {
            active += self
                .sync_commit_part(part, worker_id, sync_id)
                .await?
                .active;
        }
        Ok(SyncOutcome { active })
    }

    async fn sync_commit_part(
        &self,
        model: &str,
        worker_id: &str,
        sync_id: &str,
    ) -> Result<SyncOutcome, StateError> {
        check_name("worker_id", worker_id)?;
        check_sync_id(sync_id)?;
        let ttl = ms(self.ttls().confirmed);
        for _ in 0..3 {
            let (committed, active, idx): (u8, u64, u64) = self
                .run(
                    Lane::Bulk,
                    ScriptName::SyncCommit,
                    model,
                    &[worker_id, sync_id, &ttl],
                )
                .await
                .map_err(|e| aborted(unknown_worker(e, model, worker_id), sync_id))?;
            // Either way a patch is due: ours, or the previous one to finish.
            let held = self.sync_patch(model, idx).await?;
            if committed == 1 {
                metrics::counter!("prefix_router_entries_total", "op" => "sync").increment(active);
                return Ok(SyncOutcome { active: held });
            }
        }
        Err(StateError::Script {
            script: ScriptName::SyncCommit.file(),
            detail: "another sync of this worker kept the patch busy".into(),
        })
    }

    /// Runs sync patch steps for incarnation `idx` until it is done; returns
    /// the number of blocks the incarnation then holds.
    pub(crate) async fn sync_patch(&self, model: &str, idx: u64) -> Result<u64, StateError> {
        let (idx, budget) = (idx.to_string(), self.limits().step_budget.to_string());
        loop {
            let (done, n): (u8, u64) = self
                .run(Lane::Bulk, ScriptName::SyncPatch, model, &[&idx, &budget])
                .await?;
            if done == 1 {
                return Ok(n);
            }
        }
    }
}

/// A script's "ERR sync aborted" as [`StateError::SyncAborted`].
fn aborted(err: StateError, sync_id: &str) -> StateError {
    match err {
        StateError::Script { ref detail, .. } if detail.contains("sync aborted") => {
            StateError::SyncAborted {
                sync_id: sync_id.to_owned(),
            }
        }
        other => other,
    }
}

fn too_large(n: usize, max: usize) -> StateError {
    StateError::Invalid {
        what: "active_hashes",
        detail: format!("snapshot has {n} or more hashes; at most {max}"),
    }
}
