//! From the shared state's view of the workers to the policy's candidates.

use crate::routing::{Candidate, STALE_LOAD};
use protocol::WorkerRole;
use state::{PrefixProbe, WorkerMatch};

/// A worker the proxy may send to: its candidate data and its URL.
#[derive(Debug, Clone)]
pub struct Target {
    /// The policy's view.
    pub candidate: Candidate,
    /// Base URL of the worker.
    pub url: String,
    /// Leading blocks of the request it holds.
    pub matched_blocks: usize,
    /// Already claimed and counted in flight by the atomic routing step.
    pub assigned: bool,
    /// The prompt tokens that step counted as its prefill, when assigned.
    pub prefill_tokens: u64,
    /// Its prefill/decode role.
    pub role: WorkerRole,
}

/// Turns a lookup into targets; `block_size` converts blocks to tokens.
pub fn targets(lookup: &PrefixProbe, block_size: usize) -> Vec<Target> {
    lookup
        .workers
        .iter()
        .map(|w| target(w, block_size))
        .collect()
}

fn target(w: &WorkerMatch, block_size: usize) -> Target {
    let fresh = w.info.load_age.is_some_and(|age| age <= STALE_LOAD);
    let load = &w.info.load;
    let tiers = w.by_tier();
    Target {
        candidate: Candidate {
            worker_id: w.info.worker_id.clone(),
            cached_tokens: (w.matched_blocks * block_size) as u64,
            cpu_tokens: (tiers.cpu * block_size) as u64,
            disk_tokens: (tiers.disk * block_size) as u64,
            in_flight: w.info.in_flight,
            prefill_tokens: w.info.prefill_tokens,
            waiting: if fresh { load.num_requests_waiting } else { 0 },
            running: if fresh { load.num_requests_running } else { 0 },
            kv_usage: if fresh { load.kv_cache_usage_perc } else { 0.0 },
        },
        url: w.info.url.clone(),
        matched_blocks: w.matched_blocks,
        assigned: false,
        prefill_tokens: 0,
        role: w.info.role,
    }
}
