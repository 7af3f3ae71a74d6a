//! Routing policies: pure functions from candidates to a ranking.
//!
//! A policy sees, for each live worker, how many leading blocks of the
//! request it holds and how loaded it is, and ranks the workers best first
//! (the proxy retries down the ranking). Policies do no I/O, so they are
//! unit-tested directly and compared side by side in the load test.

mod bounded_load;
mod cache_aware;
mod consistent_hash;
mod decode;
mod least_loaded;
mod power_of_two;
mod prefill;
mod round_robin;

pub use bounded_load::{DEFAULT_LOAD_SLACK, capacity, within};
pub use cache_aware::{
    CacheAware, CacheAwareConfig, STALE_LOAD, batch_requests, effective_tokens, queued_requests,
    shared_tokens,
};
pub use consistent_hash::ConsistentHash;
pub use decode::{decode_cost, rank_decode, skip_prefill};
pub use least_loaded::LeastLoaded;
pub use power_of_two::PowerOfTwo;
pub use prefill::{LeastPrefill, PrefillPolicy};
pub use round_robin::RoundRobin;

use std::sync::Arc;

/// One live worker as a policy sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidate {
    /// The worker's id.
    pub worker_id: String,
    /// Prompt tokens it already holds in its KV cache (leading blocks × block
    /// size), on any tier.
    pub cached_tokens: u64,
    /// Of those, the tokens it holds on its CPU tier at best (after the
    /// GPU's: tiers are prefix-closed along a chain).
    pub cpu_tokens: u64,
    /// Of those, the tokens it holds on disk (or a slower tier) at best.
    pub disk_tokens: u64,
    /// Requests in flight to it from all routers.
    pub in_flight: u64,
    /// Uncached prompt tokens of those requests still before their first
    /// token: the prefill queue ahead of a new request.
    pub prefill_tokens: u64,
    /// Requests waiting in its queue, as it last reported (0 if unknown or stale).
    pub waiting: u64,
    /// Requests running, as it last reported (0 if unknown or stale).
    pub running: u64,
    /// Fraction of its KV cache in use (0 if unknown or stale).
    pub kv_usage: f64,
}

impl Candidate {
    /// Requests ahead of a new one: in flight or queued, whichever is larger
    /// (the worker's queue is a subset of the fleet's in-flight count, but
    /// it also sees requests no router counted, e.g. after a router crash).
    pub fn load(&self) -> u64 {
        self.in_flight.max(self.waiting)
    }
}

/// What a policy knows about the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRequest {
    /// Prompt length in tokens.
    pub prompt_tokens: u64,
    /// A stable key of the prompt's prefix (its first block hash), for
    /// affinity-based policies.
    pub prefix_key: u64,
}

/// A routing policy. `rank` returns indices into `candidates`, best first;
/// every index appears once.
pub trait Policy: Send + Sync {
    /// The policy's name, as used in configuration and metrics.
    fn name(&self) -> &'static str;
    /// Ranks the candidates for this request.
    fn rank(&self, request: &RouteRequest, candidates: &[Candidate]) -> Vec<usize>;
}

/// Builds the policy named `name` (`cache_aware`, `round_robin`,
/// `least_loaded`, `power_of_two`, `consistent_hash`).
pub fn policy_by_name(name: &str, cache_aware: CacheAwareConfig) -> Option<Arc<dyn Policy>> {
    let p: Arc<dyn Policy> = match name {
        "cache_aware" => Arc::new(CacheAware::new(cache_aware)),
        "round_robin" => Arc::new(RoundRobin::default()),
        "least_loaded" => Arc::new(LeastLoaded),
        "power_of_two" => Arc::new(PowerOfTwo),
        "consistent_hash" => Arc::new(ConsistentHash::new(cache_aware.epsilon)),
        _ => return None,
    };
    Some(p)
}

/// Indices sorted by `key`; ties are broken at random, so that equal
/// workers share the load instead of the first one taking it all.
fn ranked_by<K: PartialOrd>(candidates: &[Candidate], key: impl Fn(&Candidate) -> K) -> Vec<usize> {
    let keyed: Vec<(K, u64)> = candidates
        .iter()
        .map(|c| (key(c), rand::random::<u64>()))
        .collect();
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        keyed[a]
            .0
            .partial_cmp(&keyed[b].0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(keyed[a].1.cmp(&keyed[b].1))
    });
    order
}

/// A request of `tokens` prompt tokens (tests).
#[cfg(test)]
pub(crate) fn req(tokens: u64) -> RouteRequest {
    RouteRequest {
        prompt_tokens: tokens,
        prefix_key: 0,
    }
}

#[cfg(test)]
pub(crate) fn cand(id: &str, cached: u64, in_flight: u64) -> Candidate {
    Candidate {
        worker_id: id.into(),
        cached_tokens: cached,
        in_flight,
        ..Candidate::default()
    }
}
