//! [`CacheAware`]: the deepest cached prefix, weighted against load, under a
//! bound on load.

use super::bounded_load::{capacity, within};
use super::{Candidate, Policy, RouteRequest, ranked_by};
use state::RouteParams;
/// Worker-reported load older than this is ignored (in-flight still counts).
pub use state::STALE_LOAD;

/// Parameters of the cache-aware policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheAwareConfig {
    /// Bounded load: a worker above (1 + ε) × the mean load (counting the
    /// request being placed) is not chosen for affinity.
    pub epsilon: f64,
    /// Requests always allowed on top of the proportional bound.
    pub load_slack: u64,
    /// Cost of one request waiting in a worker's queue for a place in the
    /// batch, in prompt tokens: how many uncached tokens that wait is worth.
    pub tokens_per_queued_request: f64,
    /// The engines' `max_num_seqs`: the batch a worker runs; requests
    /// beyond it queue.
    pub max_num_seqs: u64,
    /// Cost of each request in a worker's batch, in prompt tokens: a larger
    /// batch makes each engine step, prefills included, a little longer.
    /// Small; it mostly orders workers whose caches tie, by occupancy.
    pub tokens_per_running_request: f64,
    /// Weight of the request's own uncached tokens against the prefills
    /// queued before it: above 1, a prefill also counts for the work it adds
    /// to the worker, which delays every later request there.
    pub uncached_weight: f64,
    /// Extra cost, in tokens, at a full KV cache (scaled by usage above
    /// `kv_pressure_from`): a nearly full cache evicts what we route for.
    pub kv_pressure_tokens: f64,
    /// KV usage where the pressure penalty starts.
    pub kv_pressure_from: f64,
    /// What a prompt token cached on a worker's CPU tier is worth against
    /// one on its GPU (0 to 1): the prefill is saved, a load over PCIe is
    /// not.
    pub cpu_tier_weight: f64,
    /// What a prompt token cached on disk (or any slower tier) is worth
    /// against one on the GPU (0 to 1).
    pub disk_tier_weight: f64,
}

impl Default for CacheAwareConfig {
    /// The weights of [`RouteParams::default`], their one definition.
    fn default() -> Self {
        let d = RouteParams::default();
        CacheAwareConfig {
            epsilon: d.epsilon,
            load_slack: d.load_slack,
            tokens_per_queued_request: d.tokens_per_queued_request,
            max_num_seqs: d.max_num_seqs,
            tokens_per_running_request: d.tokens_per_running_request,
            uncached_weight: d.uncached_weight,
            kv_pressure_tokens: d.kv_pressure_tokens,
            kv_pressure_from: d.kv_pressure_from,
            cpu_tier_weight: d.cpu_tier_weight,
            disk_tier_weight: d.disk_tier_weight,
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
            max_num_seqs: self.max_num_seqs,
            tokens_per_running_request: self.tokens_per_running_request,
            uncached_weight: self.uncached_weight,
            cpu_tier_weight: self.cpu_tier_weight,
            disk_tier_weight: self.disk_tier_weight,
            kv_pressure_tokens: self.kv_pressure_tokens,
            kv_pressure_from: self.kv_pressure_from,
            stale_load: STALE_LOAD,
            seed,
        }
    }
}

/// Ranks workers within the load bound by an estimate of time to first
/// token, in prompt tokens: the part of the prompt they would prefill
/// (weighed [`uncached_weight`](CacheAwareConfig::uncached_weight): it
/// delays the requests after it there too, so a hit is worth more than
/// this request's own first token), plus
/// the prefills ahead of it (the uncached tokens of requests sent there and
/// not yet past their first token: an engine's prefill throughput is
/// shared, so they delay this one's first token), plus a little per request
/// in its batch (a larger batch makes every engine step longer), plus the
/// wait of requests queued beyond the batch (`max_num_seqs`), plus a penalty
/// near a full KV cache. Requests that are only decoding cost little:
/// continuous batching admits a new request beside them. So the deepest
/// match wins unless the prefills queued before it cost more than the match
/// saves. Workers over the bound come last, by load. Equal costs (a miss on
/// an idle fleet) are broken at random, never "always the first worker".
///
/// KV tiers: a token a worker holds on its CPU tier counts as
/// [`cpu_tier_weight`](CacheAwareConfig::cpu_tier_weight) of a cached one,
/// on disk as [`disk_tier_weight`](CacheAwareConfig::disk_tier_weight)
/// ([`effective_tokens`]): a CPU hit still beats a miss, a GPU hit beats
/// both.
///
/// Hotspot guard: a prefix that at least half of the workers (two at least)
/// already hold (a global system prompt) is counted as cached on every
/// worker ([`shared_tokens`]), so it spreads by occupancy. Otherwise, at a
/// load too light for the bound to spill, the workers that do not hold it
/// yet would never be chosen: their one prefill of it costs more than the
/// holders' batches, so the prefix would stay where it is and the rest of
/// the fleet would idle. At equal cost a holder still wins, so the prefix
/// spreads only when the holders' load makes them dearer, not at random on
/// an idle fleet.
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
    /// with `shared` (tier-weighted) tokens counted as cached everywhere
    /// ([`shared_tokens`]).
    pub fn cost(&self, request: &RouteRequest, c: &Candidate, shared: f64) -> f64 {
        let cfg = &self.config;
        let cached = effective_tokens(cfg, c).max(shared);
        let uncached = (request.prompt_tokens as f64 - cached).max(0.0) * cfg.uncached_weight;
        let queue = queued_requests(c, cfg.max_num_seqs) as f64 * cfg.tokens_per_queued_request;
        let batch = batch_requests(c, cfg.max_num_seqs) as f64 * cfg.tokens_per_running_request;
        uncached + c.prefill_tokens as f64 + batch + queue + kv_pressure(cfg, c.kv_usage)
    }
}

/// `c`'s cached tokens, each weighted by its tier: GPU ones count 1, CPU
/// ones `cpu_tier_weight`, disk ones `disk_tier_weight`. route.lua sums
/// the same terms in the same order, so both get the same double.
pub fn effective_tokens(cfg: &CacheAwareConfig, c: &Candidate) -> f64 {
    let lower = c
        .cpu_tokens
        .saturating_add(c.disk_tokens)
        .min(c.cached_tokens);
    let gpu = c.cached_tokens - lower;
    let cpu = c.cpu_tokens.min(lower);
    let disk = lower - cpu;
    gpu as f64 + cpu as f64 * cfg.cpu_tier_weight + disk as f64 * cfg.disk_tier_weight
}

/// The penalty of a KV cache used at `usage`, in tokens: 0 up to
/// `kv_pressure_from`, then rising to `kv_pressure_tokens` at a full cache
/// (a nearly full cache evicts what was routed there, or preempts).
pub fn kv_pressure(cfg: &CacheAwareConfig, usage: f64) -> f64 {
    if usage > cfg.kv_pressure_from {
        (usage - cfg.kv_pressure_from) / (1.0 - cfg.kv_pressure_from).max(f64::EPSILON)
            * cfg.kv_pressure_tokens
    } else {
        0.0
    }
}

/// The requests at `c` (in flight, or running and waiting as it reported,
/// whichever is more).
fn occupancy(c: &Candidate) -> u64 {
    c.in_flight.max(c.running.saturating_add(c.waiting))
}

/// The requests in `c`'s batch: at most `max_num_seqs` of those there.
/// route.lua computes the same.
pub fn batch_requests(c: &Candidate, max_num_seqs: u64) -> u64 {
    occupancy(c).min(max_num_seqs)
}

/// Requests waiting at `c` for a place in its batch of `max_num_seqs`: those
/// beyond it among the requests there (in flight, or running and waiting
/// as it reported, whichever is more), or the waiting it reported if more.
/// route.lua computes the same.
pub fn queued_requests(c: &Candidate, max_num_seqs: u64) -> u64 {
    occupancy(c).saturating_sub(max_num_seqs).max(c.waiting)
}

impl CacheAware {
    /// The ranking key: within the bound before over it; then the cost;
    /// then, at equal cost, the deeper real match first, tier-weighted (so
    /// a hot prefix counted as cached everywhere still goes to a holder
    /// while holders cost no more than the rest); over the bound, the
    /// least loaded.
    pub fn key(
        &self,
        c: &Candidate,
        request: &RouteRequest,
        cap: u64,
        shared: f64,
    ) -> (u8, f64, f64) {
        if within(c, cap) {
            (
                0,
                self.cost(request, c, shared),
                -effective_tokens(&self.config, c),
            )
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
        let shared = shared_tokens(&self.config, candidates);
        ranked_by(candidates, |c| self.key(c, request, cap, shared))
    }
}

/// The cached prefix at least half of the candidates (two at least) hold,
/// in tier-weighted tokens ([`effective_tokens`]): the max(2, ⌈n/2⌉)-th
/// largest; 0 with fewer than two candidates. route.lua computes the same.
pub fn shared_tokens(cfg: &CacheAwareConfig, candidates: &[Candidate]) -> f64 {
    let k = candidates.len().div_ceil(2).max(2);
    if candidates.len() < 2 {
        return 0.0;
    }
    let mut cached: Vec<f64> = candidates
        .iter()
        .map(|c| effective_tokens(cfg, c))
        .collect();
    cached.sort_unstable_by(|a, b| b.total_cmp(a));
    cached[k - 1]
}

#[cfg(test)]
#[path = "cache_aware_tests.rs"]
mod tests;
