//! The JSON bodies of the fleet's internal API (`src/api/internal.rs`), as
//! a worker sends them, and the replies it reads. Block hashes serialize as
//! [`BlockHash`] does: 16 lower-case hex digits.

use serde::{Deserialize, Serialize};

use crate::hashing::BlockHash;
use crate::state::WorkerLoad;

/// What the fleet answered to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HeartbeatReply {
    /// The worker's incarnation; a different number than last time means
    /// the fleet forgot the worker (lease expired or drained) in between.
    pub incarnation: u64,
    /// The lease length: heartbeat well within it.
    pub lease_ms: u64,
    /// True when this heartbeat registered a new incarnation: the fleet holds
    /// no blocks for the worker, a full sync is needed.
    pub registered: bool,
}

/// What the fleet answered to a committed sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncReply {
    /// Blocks the fleet now holds for the worker (the snapshot plus live
    /// speculative claims of requests routed meanwhile).
    pub active: u64,
    /// Requests the snapshot took.
    pub chunks: usize,
}

/// `POST /internal/heartbeat`.
#[derive(Serialize)]
pub(super) struct HeartbeatBody<'a> {
    pub(super) worker_id: &'a str,
    pub(super) url: &'a str,
    pub(super) model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) load: Option<WorkerLoad>,
}

/// `POST /internal/stored`.
#[derive(Serialize)]
pub(super) struct StoredBody<'a> {
    pub(super) worker_id: &'a str,
    pub(super) model: &'a str,
    pub(super) block_hashes: &'a [BlockHash],
}

/// `POST /internal/eviction`.
#[derive(Serialize)]
pub(super) struct EvictionBody<'a> {
    pub(super) worker_id: &'a str,
    pub(super) model: &'a str,
    pub(super) evicted_hashes: &'a [BlockHash],
}

/// `POST /internal/sync`: a whole snapshot, or one chunk of `sync_id`.
#[derive(Serialize)]
pub(super) struct SyncBody<'a> {
    pub(super) worker_id: &'a str,
    pub(super) model: &'a str,
    pub(super) active_hashes: &'a [BlockHash],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sync_id: Option<&'a str>,
    pub(super) last: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_match_the_internal_api() {
        let hashes = [BlockHash(1), BlockHash(u64::MAX)];
        let body = SyncBody {
            worker_id: "w",
            model: "m",
            active_hashes: &hashes,
            sync_id: None,
            last: true,
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({"worker_id": "w", "model": "m",
                "active_hashes": ["0000000000000001", "ffffffffffffffff"], "last": true})
        );
        let hb = HeartbeatBody {
            worker_id: "w",
            url: "http://h:1",
            model: "m",
            load: Some(WorkerLoad {
                num_requests_waiting: 2,
                num_requests_running: 3,
                kv_cache_usage_perc: 0.5,
            }),
        };
        assert_eq!(
            serde_json::to_value(&hb).unwrap()["load"],
            serde_json::json!({"num_requests_waiting": 2, "num_requests_running": 3,
                "kv_cache_usage_perc": 0.5})
        );
    }
}
