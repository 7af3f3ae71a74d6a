//! [`StateTtls`] and [`BatchLimits`]: how long state lives, how big calls get.

use std::time::Duration;

/// Lifetimes of entries and leases.
#[derive(Debug, Clone)]
pub struct StateTtls {
    /// A block claimed on routing, until the worker confirms it.
    pub speculative: Duration,
    /// A confirmed block; every sync that lists it refreshes it.
    pub confirmed: Duration,
    /// A worker that stops heartbeating is out of routing after this.
    pub worker_lease: Duration,
    /// A router's in-flight counts stop counting this long after it stops.
    pub router_lease: Duration,
    /// A staged, never committed sync disappears after this.
    pub sync_stage: Duration,
    /// A sync patch idle this long is resumed by any router's gc.
    pub patch_stall: Duration,
}

impl Default for StateTtls {
    fn default() -> Self {
        StateTtls {
            speculative: Duration::from_secs(30),
            confirmed: Duration::from_secs(600),
            worker_lease: Duration::from_secs(15),
            router_lease: Duration::from_secs(15),
            sync_stage: Duration::from_secs(120),
            patch_stall: Duration::from_secs(2),
        }
    }
}

/// Chunk sizes (each script call stays near 1 ms of server time) and caps.
#[derive(Debug, Clone)]
pub struct BatchLimits {
    /// Hashes per claim / stored / evict / apply_events call.
    pub hashes_per_call: usize,
    /// Hashes per lookup call (cheaper per hash than writes).
    pub lookup_per_call: usize,
    /// Hashes per sync staging call.
    pub stage_per_call: usize,
    /// Hashes visited per sync patch step (mostly batched membership probes).
    pub step_budget: usize,
    /// Hashes visited per gc sweep or purge step (each touches the forward map).
    pub sweep_budget: usize,
    /// Most hashes in one stored, eviction or events request (an events
    /// request's groups together).
    pub max_batch_hashes: usize,
    /// Most hashes in one worker's snapshot (all chunks together).
    pub max_sync_hashes: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            hashes_per_call: 64,
            lookup_per_call: 1024,
            stage_per_call: 512,
            step_budget: 128,
            sweep_budget: 128,
            max_batch_hashes: 65_536,
            max_sync_hashes: 524_288,
        }
    }
}

/// Milliseconds as the scripts take them.
pub(crate) fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}
