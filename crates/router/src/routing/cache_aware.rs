//! [`CacheAware`]: the deepest cached prefix, weighted against load, under a
//! bound on load.

use std::time::Duration;

use super::bounded_load::{DEFAULT_LOAD_SLACK, capacity, within};
use super::{Candidate, Policy, RouteRequest, ranked_by};
use state::RouteParams;

/// Worker-reported load older than this is ignored (in-flight still counts).
pub const STALE_LOAD: Duration = Duration::from_secs(10);

/// Parameters of the cache-aware policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheAwareConfig {
    /// Bounded load: a worker above (1 + ε) × the mean load (counting the
    /// request being placed) is not chosen for affinity.
    pub epsilon: f64,
    /// Requests always allowed on top of the proportional bound.
    pub load_slack: u64,
    /// Prefill cost of one request ahead in a worker's queue, in prompt
    /// tokens: how many uncached tokens one queued request is worth.
    pub tokens_per_queued_request: f64,
    /// Extra cost, in tokens, at a full KV cache (scaled by usage above
    /// `kv_pressure_from`): a nearly full cache evicts what we route for.
    pub kv_pressure_tokens: f64,
    /// KV usage where the pressure penalty starts.
    pub kv_pressure_from: f64,
}

impl Default for CacheAwareConfig {
    fn default() -> Self {
        CacheAwareConfig {
            epsilon: 0.25,
            load_slack: DEFAULT_LOAD_SLACK,
            tokens_per_queued_request: 512.0,
            kv_pressure_tokens: 2048.0,
            kv_pressure_from: 0.9,
        }
    }
}

impl CacheAwareConfig {
    /// The inputs of `lua/route.lua`, which makes this policy's choice inside
    /// Valkey; the one place the two are wired together.
    pub fn route_params(&self, prompt_tokens: u64, block_size: usize, seed: u32) -> RouteParams {
        RouteParams {
            prompt_tokens,
            block_size,
            epsilon: self.epsilon,
            load_slack: self.load_slack,
            tokens_per_queued_request: self.tokens_per_queued_request,
            kv_pressure_tokens: self.kv_pressure_tokens,
            kv_pressure_from: self.kv_pressure_from,
            stale_load: STALE_LOAD,
            seed,
        }
    }
}

/// Ranks workers within the load bound by an estimate of time to first
/// token, in prompt tokens: the part of the prompt they would prefill, plus
/// the requests ahead of this one, plus a penalty near a full KV cache. So
/// the deepest match wins unless its queue costs more than the match saves.
/// Workers over the bound come last, by load. Equal costs (a miss on an idle
/// fleet) are broken at random, never "always the first worker".
///
/// Hotspot guard: a prefix that a majority of the workers already hold (a
/// global system prompt) is counted as cached on every worker
/// ([`shared_tokens`]). Otherwise, at a load too light for the bound to
/// spill, the workers that do not hold it yet would never be chosen: their
/// one prefill of it is not worth a queued request, so the prefix would stay
/// on the majority and the rest of the fleet would idle. At equal cost a
/// holder still wins, so the prefix spreads only when the holders' load
/// makes them dearer, not at random on an idle fleet.
#[derive(Debug, Clone)]
pub struct CacheAware {
    config: CacheAwareConfig,
}

impl CacheAware {
    /// A policy with these parameters.
    pub fn new(config: CacheAwareConfig) -> Self {
        CacheAware { config }
    }

    /// The parameters.
    pub fn config(&self) -> &CacheAwareConfig {
        &self.config
    }

    /// The estimated cost of sending the request to `c`, in prompt tokens,
    /// with `shared` tokens counted as cached everywhere ([`shared_tokens`]).
    pub fn cost(&self, request: &RouteRequest, c: &Candidate, shared: u64) -> f64 {
        let cfg = &self.config;
        let cached = c.cached_tokens.max(shared);
        let uncached = request.prompt_tokens.saturating_sub(cached) as f64;
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

impl CacheAware {
    /// The ranking key: within the bound before over it; then the cost;
    /// then, at equal cost, the deeper real match first (so a hot prefix
    /// counted as cached everywhere still goes to a holder while holders
    /// cost no more than the rest); over the bound, the least loaded.
    pub fn key(
        &self,
        c: &Candidate,
        request: &RouteRequest,
        cap: u64,
        shared: u64,
    ) -> (u8, f64, f64) {
        if within(c, cap) {
            (0, self.cost(request, c, shared), -(c.cached_tokens as f64))
        } else {
            (1, c.load() as f64, 0.0)
        }
    }
}

impl Policy for CacheAware {
    fn name(&self) -> &'static str {
        "cache_aware"
    }

    fn rank(&self, request: &RouteRequest, candidates: &[Candidate]) -> Vec<usize> {
        let cap = capacity(candidates, self.config.epsilon, self.config.load_slack);
        let shared = shared_tokens(candidates);
        ranked_by(candidates, |c| self.key(c, request, cap, shared))
    }
}

/// The cached prefix a strict majority of the candidates (at least two)
/// hold: the ⌊n/2⌋+1-th largest cached length; 0 with fewer than two
/// candidates. route.lua computes the same.
pub fn shared_tokens(candidates: &[Candidate]) -> u64 {
    let k = candidates.len() / 2 + 1;
    if candidates.len() < 2 {
        return 0;
    }
    let mut cached: Vec<u64> = candidates.iter().map(|c| c.cached_tokens).collect();
    cached.sort_unstable_by(|a, b| b.cmp(a));
    cached[k - 1]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

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

    fn policy() -> CacheAware {
        CacheAware::new(CacheAwareConfig::default())
    }

    #[test]
    fn the_deepest_match_wins_at_equal_load() {
        // Four workers, so that no prefix here is held by a majority.
        let c = vec![
            cand("a", 0, 1),
            cand("b", 4096, 1),
            cand("c", 1024, 1),
            cand("d", 0, 1),
        ];
        assert_eq!(ids(&c, policy().rank(&req(5000), &c))[..2], ["b", "c"]);
    }

    #[test]
    fn a_match_is_weighed_against_the_queue_in_front_of_it() {
        // 1,024 cached tokens are worth two queued requests, not three.
        let c = vec![cand("hot", 1024, 3), cand("idle", 0, 0), cand("x", 0, 3)];
        assert_eq!(ids(&c, policy().rank(&req(1100), &c))[0], "idle");
        let c = vec![cand("hot", 1024, 1), cand("idle", 0, 0), cand("x", 0, 1)];
        assert_eq!(ids(&c, policy().rank(&req(1100), &c))[0], "hot");
    }

    #[test]
    fn bounded_load_spreads_a_prefix_that_every_request_shares() {
        // A huge shared prefix outweighs any queue in the cost model, but
        // with 7 in flight its holder is over ⌈1.25 × 8 / 2⌉ + 2 = 7 and
        // loses affinity; with 1 it is under ⌈1.25 × 2 / 2⌉ + 2 = 4.
        let c = vec![cand("holder", 100_000, 7), cand("other", 0, 0)];
        assert_eq!(
            ids(&c, policy().rank(&req(100_000), &c)),
            ["other", "holder"]
        );
        let c = vec![cand("holder", 100_000, 1), cand("other", 0, 0)];
        assert_eq!(
            ids(&c, policy().rank(&req(100_000), &c)),
            ["holder", "other"]
        );
    }

    #[test]
    fn a_prefix_most_workers_hold_counts_as_cached_on_all() {
        // Three of four hold the 2,048-token system prompt; the fourth is
        // idle. Without the guard its prefill outweighs one queued request.
        let c = vec![
            cand("a", 2048, 1),
            cand("b", 2048, 1),
            cand("c", 2048, 1),
            cand("new", 0, 0),
        ];
        assert_eq!(shared_tokens(&c), 2048);
        assert_eq!(ids(&c, policy().rank(&req(2100), &c))[0], "new");
        // Held by two of four: not a majority, locality wins.
        let c = vec![
            cand("a", 2048, 1),
            cand("b", 2048, 1),
            cand("c", 0, 0),
            cand("d", 0, 0),
        ];
        assert_eq!(shared_tokens(&c), 0);
        assert!(["a", "b"].contains(&ids(&c, policy().rank(&req(2100), &c))[0].as_str()));
        // One worker alone never makes a prefix shared.
        assert_eq!(shared_tokens(&[cand("a", 2048, 1)]), 0);
        assert_eq!(shared_tokens(&[cand("a", 2048, 1), cand("b", 0, 0)]), 0);
    }

    #[test]
    fn a_nearly_full_kv_cache_is_penalised() {
        let mut full = cand("full", 512, 0);
        full.kv_usage = 1.0;
        let c = vec![full, cand("roomy", 0, 0)];
        assert_eq!(ids(&c, policy().rank(&req(1000), &c)), ["roomy", "full"]);
    }

    #[test]
    fn reported_queues_count_when_larger_than_in_flight() {
        let mut busy = cand("busy", 0, 0);
        busy.waiting = 5;
        let c = vec![busy, cand("free", 0, 1)];
        assert_eq!(ids(&c, policy().rank(&req(100), &c))[0], "free");
    }

    #[test]
    fn misses_on_an_idle_fleet_are_spread_at_random() {
        let c: Vec<Candidate> = (0..4).map(|i| cand(&format!("w{i}"), 0, 0)).collect();
        let firsts: BTreeSet<String> = (0..200)
            .map(|_| ids(&c, policy().rank(&req(500), &c))[0].clone())
            .collect();
        assert_eq!(
            firsts.len(),
            4,
            "ties must not always pick the same worker: {firsts:?}"
        );
    }
}
