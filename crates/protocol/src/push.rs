//! The worker push API's JSON bodies (`/internal/*`), one definition for
//! both sides: the router deserializes what the `worker` crate's client
//! serializes, and the other way round for replies. Block hashes serialize
//! as [`BlockHash`] does (16 lower-case hex digits) and parse from that or
//! from a JSON unsigned integer.
//!
//! Requests borrow on the sending side and own on the receiving side
//! (`Cow`), so a worker does not copy a 65,536-hash batch to send it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::hashing::BlockHash;
use crate::load::WorkerLoad;
use crate::role::WorkerRole;
use crate::tier::Tier;

mod events;

pub use events::{BlockEvents, EventKind, EventsBody, EventsReply};

/// `POST /internal/heartbeat`: register, or renew the lease and load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatBody<'a> {
    /// The worker's stable id.
    pub worker_id: Cow<'a, str>,
    /// Base URL requests are sent to.
    pub url: Cow<'a, str>,
    /// The model it serves; may be omitted once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    /// Its load, when it reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<WorkerLoad>,
    /// The family depth it computes `families` with ([`crate::family`]);
    /// a sharded fleet refuses a worker whose depth differs from its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family_blocks: Option<usize>,
    /// Its role in a prefill/decode-disaggregated fleet ([`WorkerRole`]);
    /// absent means [`WorkerRole::Both`], as every worker was before roles
    /// existed. An unknown word fails the whole body with the valid ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<WorkerRole>,
}

/// `POST /internal/stored`: blocks the worker now caches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredBody<'a> {
    /// The worker's id.
    pub worker_id: Cow<'a, str>,
    /// The model; may be omitted once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    /// The blocks, in any order.
    pub block_hashes: Cow<'a, [BlockHash]>,
    /// Each block's family ([`crate::family`]), in the same order; null for
    /// a head block. Absent: the fleet writes every block to every shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub families: Option<Cow<'a, [Option<BlockHash>]>>,
    /// The best medium the worker now holds these blocks on, as a KV
    /// event's label or a tier name ([`Tier::from_label`]; a label it does
    /// not know is refused). Absent: the GPU, as every report before tiers. A
    /// block that leaves the GPU but stays on the CPU is reported again
    /// here with `"cpu"` (not evicted), and with `"gpu"` once back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub medium: Option<Tier>,
}

/// `POST /internal/eviction`: blocks the worker evicted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvictionBody<'a> {
    /// The worker's id.
    pub worker_id: Cow<'a, str>,
    /// The model; may be omitted once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    /// The blocks, in any order.
    pub evicted_hashes: Cow<'a, [BlockHash]>,
    /// Each block's family ([`crate::family`]), in the same order; null for
    /// a head block. Absent: the fleet writes every block to every shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub families: Option<Cow<'a, [Option<BlockHash>]>>,
}

/// `POST /internal/sync`: a whole snapshot, or one chunk of `sync_id`
/// (`"last": false` on every chunk but the last).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncBody<'a> {
    /// The worker's id.
    pub worker_id: Cow<'a, str>,
    /// The model; may be omitted once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    /// Every block the worker holds (this chunk of them).
    pub active_hashes: Cow<'a, [BlockHash]>,
    /// Each block's family ([`crate::family`]), in the same order; null for
    /// a head block. Absent: the fleet writes every block to every shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub families: Option<Cow<'a, [Option<BlockHash>]>>,
    /// Each block's best medium ([`Tier`]), in the same order, by the rule
    /// of [`Tier::from_label`] (an unknown label is refused). Absent: all
    /// on the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<Cow<'a, [Tier]>>,
    /// Names one chunked snapshot; never reused for another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_id: Option<Cow<'a, str>>,
    /// False on every chunk but the last; absent means true.
    #[serde(default = "yes")]
    pub last: bool,
}

fn yes() -> bool {
    true
}

/// `POST /internal/sync/check`: the digests of the worker's indexed set
/// with its tiers ([`crate::index::tiered_digests`],
/// [`crate::index::digests_hex`]); if the fleet's equal, the periodic sync
/// is done without sending the set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncCheckBody<'a> {
    /// The worker's id.
    pub worker_id: Cow<'a, str>,
    /// The model; may be omitted once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    /// 256 digests of 16 lower-case hex digits, one string: of the whole
    /// set, or (when the heartbeat reply named several shards) one string
    /// per shard in `shard_digests` and this one empty.
    #[serde(default)]
    pub digests: Cow<'a, str>,
    /// Per shard, in shard order: the digests of the blocks that shard
    /// holds ([`crate::family::block_shards`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_digests: Option<Vec<String>>,
}

/// Most differing digest buckets (of 256, per shard) that a worker repairs
/// with `POST /internal/sync/repair`; more means most of its set differs
/// (an emptied Valkey, a restart), and it sends a full sync.
pub const MAX_REPAIR_BUCKETS: usize = 32;

/// `POST /internal/sync/repair`: after a sync check listed a few differing
/// buckets, the worker's blocks in those buckets and its digests again. The
/// fleet syncs those buckets alone (missing blocks added, gone ones
/// removed) and answers as a check would ([`SyncCheckReply`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncRepairBody<'a> {
    /// The worker's id.
    pub worker_id: Cow<'a, str>,
    /// The model; may be omitted once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    /// The buckets the check listed (at most [`MAX_REPAIR_BUCKETS`] per
    /// shard), as it listed them.
    pub buckets: Vec<String>,
    /// The worker's blocks in those buckets (blocks of other buckets are
    /// ignored).
    pub hashes: Cow<'a, [BlockHash]>,
    /// Each block's family, as in [`SyncBody`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub families: Option<Cow<'a, [Option<BlockHash>]>>,
    /// Each block's best medium, as in [`SyncBody`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<Cow<'a, [Tier]>>,
    /// The digests of the whole snapshot, as in [`SyncCheckBody`].
    #[serde(default)]
    pub digests: Cow<'a, str>,
    /// Per shard digests, as in [`SyncCheckBody`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_digests: Option<Vec<String>>,
}

/// The answer to a sync check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncCheckReply {
    /// True when the fleet holds exactly the worker's set (its entries are
    /// renewed); false when a full sync is needed.
    pub unchanged: bool,
    /// The digest buckets (two hex digits) that differ, when known.
    #[serde(default)]
    pub differing: Vec<String>,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReply {
    /// The worker's id.
    pub worker_id: String,
    /// The model it is registered for.
    pub model: String,
    /// The lease length: heartbeat well within it.
    pub lease_ms: u64,
    /// The worker's incarnation; a different number than last time means
    /// the fleet forgot the worker (lease expired or drained) in between.
    pub incarnation: u64,
    /// True when this heartbeat registered a new incarnation: the fleet holds
    /// no blocks for the worker, a full sync is needed.
    pub registered: bool,
    /// Shards the model's index is split over (absent: one); a sync check
    /// then sends digests per shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,
}

/// The answer to `stored`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredReply {
    /// Entries that did not exist.
    pub inserted: u64,
    /// Speculative entries now confirmed.
    pub promoted: u64,
    /// Confirmed entries whose expiry was pushed back.
    pub refreshed: u64,
}

/// The answer to `eviction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvictionReply {
    /// Entries removed.
    pub removed: u64,
}

/// The answer to `sync`: `active` once a snapshot is applied (202 with
/// `staged` for a chunk before the last).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncReply {
    /// The chunked snapshot's id, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_id: Option<String>,
    /// Hashes staged so far (chunks before the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<u64>,
    /// Blocks the fleet now holds for the worker (the snapshot plus live
    /// speculative claims of requests routed meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<u64>,
}

/// The answer to `DELETE /internal/workers/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeregisterReply {
    /// The worker's id.
    pub worker_id: String,
    /// Its model.
    pub model: String,
    /// Always true: an unknown worker is a 404.
    pub deregistered: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_in_the_api_shape() {
        let hashes = [BlockHash(1), BlockHash(u64::MAX)];
        let body = SyncBody {
            worker_id: "w".into(),
            model: Some("m".into()),
            active_hashes: Cow::Borrowed(&hashes),
            families: None,
            tiers: None,
            sync_id: None,
            last: true,
        };
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"worker_id": "w", "model": "m",
                "active_hashes": ["0000000000000001", "ffffffffffffffff"], "last": true})
        );
        let back: SyncBody<'_> = serde_json::from_value(json).unwrap();
        assert_eq!(back.active_hashes.as_ref(), &hashes);
        let hb = HeartbeatBody {
            worker_id: "w".into(),
            url: "http://h:1".into(),
            model: None,
            load: Some(WorkerLoad {
                num_requests_waiting: 2,
                num_requests_running: 3,
                kv_cache_usage_perc: 0.5,
            }),
            family_blocks: None,
            role: None,
        };
        let json = serde_json::to_value(&hb).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"worker_id": "w", "url": "http://h:1", "load":
                {"num_requests_waiting": 2, "num_requests_running": 3, "kv_cache_usage_perc": 0.5}})
        );
    }

    #[test]
    fn omitted_fields_take_their_defaults() {
        let b: SyncBody<'_> =
            serde_json::from_str(r#"{"worker_id":"w","active_hashes":[1,"00000000000000ff"]}"#)
                .unwrap();
        assert!(b.last && b.model.is_none() && b.sync_id.is_none());
        assert_eq!(b.active_hashes.as_ref(), &[BlockHash(1), BlockHash(255)]);
        let hb: HeartbeatBody<'_> = serde_json::from_str(
            r#"{"worker_id":"w","url":"u","load":{"num_requests_waiting":4}}"#,
        )
        .unwrap();
        assert_eq!(
            hb.load,
            Some(WorkerLoad {
                num_requests_waiting: 4,
                ..WorkerLoad::default()
            })
        );
        assert_eq!(hb.role, None);
        let s: StoredBody<'_> =
            serde_json::from_str(r#"{"worker_id":"w","block_hashes":[1]}"#).unwrap();
        assert_eq!(s.medium, None);
    }

    #[test]
    fn stored_reports_name_a_medium_and_refuse_a_malformed_one() {
        let s: StoredBody<'_> =
            serde_json::from_str(r#"{"worker_id":"w","block_hashes":[1],"medium":"CPU"}"#).unwrap();
        assert_eq!(s.medium, Some(Tier::Cpu));
        let s: StoredBody<'_> = serde_json::from_str(
            r#"{"worker_id":"w","block_hashes":[1],"medium":"LocalDiskBackend"}"#,
        )
        .unwrap();
        assert_eq!(s.medium, Some(Tier::Disk));
        for medium in ["2", r#""lmcache""#, r#""weird""#] {
            let body = format!(r#"{{"worker_id":"w","block_hashes":[1],"medium":{medium}}}"#);
            assert!(
                serde_json::from_str::<StoredBody<'_>>(&body).is_err(),
                "{body}"
            );
        }
        assert!(
            serde_json::from_str::<SyncBody<'_>>(
                r#"{"worker_id":"w","active_hashes":[1,2],"tiers":["gpu","weird"]}"#,
            )
            .is_err()
        );
        let b: SyncBody<'_> = serde_json::from_str(
            r#"{"worker_id":"w","active_hashes":[1,2],"tiers":["gpu","cpu"]}"#,
        )
        .unwrap();
        assert_eq!(b.tiers.unwrap().as_ref(), &[Tier::Gpu, Tier::Cpu]);
    }

    #[test]
    fn heartbeats_carry_a_role_and_refuse_an_unknown_one() {
        let hb: HeartbeatBody<'_> =
            serde_json::from_str(r#"{"worker_id":"w","url":"u","role":"prefill"}"#).unwrap();
        assert_eq!(hb.role, Some(WorkerRole::Prefill));
        let json = serde_json::to_value(&hb).unwrap();
        assert_eq!(json["role"], "prefill");
        let err = serde_json::from_str::<HeartbeatBody<'_>>(
            r#"{"worker_id":"w","url":"u","role":"prefil"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown worker role \"prefil\""), "{err}");
    }
}
