//! The cheap calls of anti-entropy: the snapshot's digests compared with the
//! fleet's (`/internal/sync/check`), and a repair of the few buckets that
//! differ (`/internal/sync/repair`), before any full snapshot is sent.

use std::borrow::Cow;

use protocol::family::FamilyBlock;
use protocol::index::parse_bucket_name;
use protocol::push::{MAX_REPAIR_BUCKETS, SyncCheckBody, SyncCheckReply, SyncRepairBody};

use super::client::{FleetClient, WorkerIdentity};
use super::error::PushError;
use super::wire::{check_digests, wire_blocks};

impl FleetClient {
    /// Compares the digests of the worker's snapshot with the fleet's
    /// (`POST /internal/sync/check`). Equal (`unchanged`) renews the
    /// worker's entries as a full sync would; otherwise `differing` names
    /// the buckets that differ, when the fleet knows them.
    /// `shards`: the shards the fleet splits the model into (from the
    /// heartbeat reply): more than one sends digests per shard.
    pub async fn sync_check(
        &self,
        who: &WorkerIdentity,
        snapshot: &[FamilyBlock],
        shards: usize,
    ) -> Result<SyncCheckReply, PushError> {
        let (whole, per_shard) = check_digests(snapshot, shards);
        let body = SyncCheckBody {
            worker_id: who.worker_id.as_str().into(),
            model: Some(who.model.as_str().into()),
            digests: Cow::Owned(whole),
            shard_digests: per_shard,
        };
        let mut call = self.post("sync_check", &body);
        call.url = self.url(&["internal", "sync", "check"]);
        self.check_reply("sync_check", call).await
    }

    /// Syncs only the `buckets` a check listed (`POST /internal/sync/repair`):
    /// sends the snapshot's blocks in them, and the digests again; the reply
    /// is the check's after the repair.
    pub async fn sync_repair(
        &self,
        who: &WorkerIdentity,
        snapshot: &[FamilyBlock],
        buckets: &[String],
        shards: usize,
    ) -> Result<SyncCheckReply, PushError> {
        let (whole, per_shard) = check_digests(snapshot, shards);
        let blocks = super::wire::in_buckets(snapshot, buckets, shards);
        let (hashes, families) = wire_blocks(&blocks);
        let body = SyncRepairBody {
            worker_id: who.worker_id.as_str().into(),
            model: Some(who.model.as_str().into()),
            buckets: buckets.to_vec(),
            hashes: Cow::Owned(hashes),
            families,
            tiers: super::wire::wire_tiers(&blocks),
            digests: Cow::Owned(whole),
            shard_digests: per_shard,
        };
        let mut call = self.post("sync_repair", &body);
        call.url = self.url(&["internal", "sync", "repair"]);
        call.timeout = self.config().sync_timeout;
        self.check_reply("sync_repair", call).await
    }

    async fn check_reply<B: serde::Serialize>(
        &self,
        op: &'static str,
        call: super::call::Call<'_, B>,
    ) -> Result<SyncCheckReply, PushError> {
        let url = call.url.to_string();
        let reply = self.send(call).await?;
        let detail = format!("no \"unchanged\" in {reply}");
        serde_json::from_value::<SyncCheckReply>(reply).map_err(|_| PushError::Reply {
            op,
            url,
            detail,
        })
    }
}

/// Whether a check's differing buckets are few enough for a repair: some
/// listed, all well-formed, at most [`MAX_REPAIR_BUCKETS`] in any shard.
pub(super) fn repairable(differing: &[String], shards: usize) -> bool {
    let mut per_shard = vec![0usize; shards.max(1)];
    for b in differing {
        match parse_bucket_name(b).and_then(|(s, _)| per_shard.get_mut(s)) {
            Some(n) => *n += 1,
            None => return false,
        }
    }
    !differing.is_empty() && per_shard.iter().all(|n| *n <= MAX_REPAIR_BUCKETS)
}
