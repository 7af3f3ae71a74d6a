//! [`CacheAware`]: the longest cached prefix, unless its worker is too loaded.

use super::{Candidate, Policy, RouteRequest, ranked_by};

/// Weights of the cache-aware cost model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheAwareConfig {
    /// Prefill cost of one queued or running request, in prompt tokens: how
    /// many uncached tokens one request ahead in the queue is worth.
    pub tokens_per_queued_request: f64,
    /// Extra cost, in tokens, at a full KV cache (scaled by usage above
    /// `kv_pressure_from`): a nearly full cache evicts what we route for.
    pub kv_pressure_tokens: f64,
    /// KV usage where the pressure penalty starts.
    pub kv_pressure_from: f64,
    /// Hotspot guard: a worker more than this many requests above the least
    /// loaded one is only used when no worker is within the gap.
    pub max_load_gap: u64,
}

impl Default for CacheAwareConfig {
    fn default() -> Self {
        CacheAwareConfig {
            tokens_per_queued_request: 512.0,
            kv_pressure_tokens: 2048.0,
            kv_pressure_from: 0.9,
            max_load_gap: 8,
        }
    }
}

/// Ranks workers by an estimate of time to first token, in prompt tokens:
/// the tokens it would have to prefill (the prompt minus what it holds) plus
/// the requests ahead of this one, plus a penalty near a full KV cache.
/// A prefix every request shares (a global system prompt) therefore spreads
/// once its first holder queues up, and other workers learn it, instead of
/// collapsing the fleet onto one worker; the load-gap guard bounds the
/// imbalance even for very long shared prefixes.
#[derive(Debug, Clone)]
pub struct CacheAware {
    config: CacheAwareConfig,
}

impl CacheAware {
    /// A policy with these weights.
    pub fn new(config: CacheAwareConfig) -> Self {
        CacheAware { config }
    }

    /// The estimated cost of sending the request to `c`, in prompt tokens.
    pub fn cost(&self, request: &RouteRequest, c: &Candidate) -> f64 {
        let cfg = &self.config;
        let uncached = request.prompt_tokens.saturating_sub(c.cached_tokens) as f64;
        let queue = c.load() as f64 * cfg.tokens_per_queued_request;
        let pressure = if c.kv_usage > cfg.kv_pressure_from {
            (c.kv_usage - cfg.kv_pressure_from) / (1.0 - cfg.kv_pressure_from).max(f64::EPSILON)
                * cfg.kv_pressure_tokens
        } else {
            0.0
        };
        uncached + queue + pressure
    }
}

impl Policy for CacheAware {
    fn name(&self) -> &'static str {
        "cache_aware"
    }

    fn rank(&self, request: &RouteRequest, candidates: &[Candidate]) -> Vec<usize> {
        let min_load = candidates.iter().map(Candidate::load).min().unwrap_or(0);
        let over_gap = |c: &Candidate| c.load() > min_load + self.config.max_load_gap;
        // Workers over the gap go last, whatever they hold.
        ranked_by(candidates, |c| (over_gap(c), self.cost(request, c)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::cand;
    use super::*;

    fn req(tokens: u64) -> RouteRequest {
        RouteRequest {
            prompt_tokens: tokens,
            prefix_key: 0,
        }
    }

    fn ids(c: &[Candidate], order: Vec<usize>) -> Vec<String> {
        order.into_iter().map(|i| c[i].worker_id.clone()).collect()
    }

    #[test]
    fn the_longest_cached_prefix_wins_at_equal_load() {
        let p = CacheAware::new(CacheAwareConfig::default());
        let c = vec![cand("a", 0, 1), cand("b", 4096, 1), cand("c", 1024, 1)];
        assert_eq!(ids(&c, p.rank(&req(5000), &c)), ["b", "c", "a"]);
    }

    #[test]
    fn a_loaded_holder_loses_to_an_idle_worker_when_the_queue_costs_more() {
        let p = CacheAware::new(CacheAwareConfig::default());
        // 1,024 cached tokens are worth two queued requests, not three.
        let c = vec![cand("hot", 1024, 3), cand("idle", 0, 0)];
        assert_eq!(ids(&c, p.rank(&req(1100), &c)), ["idle", "hot"]);
        let c = vec![cand("hot", 1024, 1), cand("idle", 0, 0)];
        assert_eq!(ids(&c, p.rank(&req(1100), &c)), ["hot", "idle"]);
    }

    #[test]
    fn the_hotspot_guard_caps_the_load_gap_even_for_huge_shared_prefixes() {
        let p = CacheAware::new(CacheAwareConfig::default());
        // 100k cached tokens outweigh any queue in the cost model...
        let c = vec![cand("holder", 100_000, 9), cand("other", 0, 0)];
        // ...but 9 requests ahead exceeds the gap of 8.
        assert_eq!(ids(&c, p.rank(&req(100_000), &c)), ["other", "holder"]);
        let c = vec![cand("holder", 100_000, 8), cand("other", 0, 0)];
        assert_eq!(ids(&c, p.rank(&req(100_000), &c)), ["holder", "other"]);
    }

    #[test]
    fn a_nearly_full_kv_cache_is_penalised() {
        let p = CacheAware::new(CacheAwareConfig::default());
        let mut full = cand("full", 512, 0);
        full.kv_usage = 1.0;
        let c = vec![full, cand("roomy", 0, 0)];
        assert_eq!(ids(&c, p.rank(&req(1000), &c)), ["roomy", "full"]);
    }

    #[test]
    fn reported_queues_count_when_larger_than_in_flight() {
        let p = CacheAware::new(CacheAwareConfig::default());
        let mut busy = cand("busy", 0, 0);
        busy.waiting = 5;
        let c = vec![busy, cand("free", 0, 1)];
        assert_eq!(ids(&c, p.rank(&req(100), &c)), ["free", "busy"]);
    }
}
