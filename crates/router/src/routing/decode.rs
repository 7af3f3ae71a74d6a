//! The decode half of prefill/decode disaggregation (issue 14), pure: which
//! decode worker takes a request, and whether its prefill worker can be
//! skipped.
//!
//! A decode worker does not compute the prompt (a prefill worker does and
//! hands the KV over), so what its first token waits for is different from
//! a colocated worker's: the prompt's KV it must receive (the part it does
//! not hold already), room for that KV, and a place in its running batch.
//! Every running sequence also slows each decode step of the batch (decode
//! is bound by memory bandwidth), so decode load counts running requests,
//! not the prefill queue the cache-aware policy weighs.

use super::bounded_load::{capacity, within};
use super::cache_aware::{effective_tokens, kv_pressure, queued_requests};
use super::{CacheAwareConfig, Candidate, RouteRequest, ranked_by};

/// The estimated cost of decoding the request on `c`, in prompt tokens:
/// the prompt tokens it does not hold, tier-weighted as the cache-aware
/// policy weighs them (received from the prefill worker,
/// or computed itself when the prefill is skipped), plus its batch
/// occupancy and KV usage as shares of a full batch or cache, each worth
/// `kv_pressure_tokens` (a full decode batch slows every step as a full
/// cache stalls admissions), plus requests queued beyond the batch at the
/// cache-aware policy's price, plus its KV pressure near a full cache.
pub fn decode_cost(cfg: &CacheAwareConfig, request: &RouteRequest, c: &Candidate) -> f64 {
    let fill = (request.prompt_tokens as f64 - effective_tokens(cfg, c)).max(0.0);
    let occupancy = c.in_flight.max(c.running.saturating_add(c.waiting)) as f64;
    let batch = (occupancy / cfg.max_num_seqs.max(1) as f64).min(1.0);
    let queue = queued_requests(c, cfg.max_num_seqs) as f64 * cfg.tokens_per_queued_request;
    fill + (batch + c.kv_usage.clamp(0.0, 1.0)) * cfg.kv_pressure_tokens
        + queue
        + kv_pressure(cfg, c.kv_usage)
}

/// Decode candidates, best first: within the bounded load (as the
/// cache-aware policy bounds it) by [`decode_cost`], the deeper match first
/// at equal cost; over the bound, by load. Equal ones at random.
pub fn rank_decode(
    cfg: &CacheAwareConfig,
    request: &RouteRequest,
    candidates: &[Candidate],
) -> Vec<usize> {
    let cap = capacity(candidates, cfg.epsilon, cfg.load_slack);
    ranked_by(candidates, |c| {
        if within(c, cap) {
            (0u8, decode_cost(cfg, request, c), -(c.cached_tokens as f64))
        } else {
            (1, c.load() as f64, 0.0)
        }
    })
}

/// Whether a decode worker holding `held` of the request's `prompt` tokens
/// should compute the rest itself, without a prefill worker: when it holds
/// more than `share` of the prompt (a later turn of a chat it decoded), the
/// hand-off would cost a round trip and a transfer to save little compute.
pub fn skip_prefill(share: f64, prompt: u64, held: u64) -> bool {
    prompt > 0 && held as f64 > share * prompt as f64
}

#[cfg(test)]
mod tests {
    use super::super::{cand, req};
    use super::*;

    fn first(c: &[Candidate], tokens: u64) -> String {
        let cfg = CacheAwareConfig::default();
        let order = rank_decode(&cfg, &req(tokens), c);
        c[order[0]].worker_id.clone()
    }

    #[test]
    fn the_worker_holding_the_conversation_decodes_it() {
        let c = vec![cand("a", 0, 0), cand("b", 3072, 0), cand("c", 0, 0)];
        assert_eq!(first(&c, 4000), "b");
    }

    #[test]
    fn free_kv_and_a_lighter_batch_win_a_new_prompt() {
        let mut full = cand("full", 0, 0);
        full.kv_usage = 0.85;
        let mut busy = cand("busy", 0, 0);
        busy.running = 200;
        let free = cand("free", 0, 0);
        for _ in 0..20 {
            assert_eq!(
                first(&[full.clone(), busy.clone(), free.clone()], 500),
                "free"
            );
        }
        let cfg = CacheAwareConfig::default();
        assert!(decode_cost(&cfg, &req(500), &busy) > decode_cost(&cfg, &req(500), &free));
    }

    #[test]
    fn a_holder_over_the_load_bound_is_passed_over() {
        let c = vec![cand("hot", 4096, 12), cand("cold", 0, 0)];
        assert_eq!(first(&c, 4096), "cold");
    }

    #[test]
    fn prefill_is_skipped_only_past_the_share() {
        assert!(skip_prefill(0.8, 1000, 816));
        assert!(!skip_prefill(0.8, 1000, 800));
        assert!(!skip_prefill(0.8, 1000, 0));
        assert!(!skip_prefill(0.0, 0, 0));
        assert!(!skip_prefill(1.0, 1000, 1000));
        assert!(skip_prefill(0.0, 1000, 16));
    }
}
