//! [`WorkerLoad`]: how loaded a worker says it is, in vLLM's own gauges.
//! Heartbeats carry it, the ORCA header and `/metrics` scrapes give it.

use serde::{Deserialize, Serialize};

/// Load a worker reports about itself (vLLM's gauges of the same names).
/// A missing field reads as zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerLoad {
    /// Requests queued, not yet scheduled.
    pub num_requests_waiting: u64,
    /// Requests being processed.
    pub num_requests_running: u64,
    /// Fraction of the KV cache in use, 0.0 to 1.0.
    pub kv_cache_usage_perc: f64,
}

/// The most requests a load figure may say; larger reports are bounded to
/// it wherever they are stored. No engine queues a million requests, and a
/// bound keeps every sum, comparison and reply downstream finite.
pub const MAX_REPORTED_REQUESTS: u64 = 1_000_000;
