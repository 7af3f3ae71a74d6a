//! How routing decisions are counted in the metrics: the decision's kind,
//! the time of each phase, and the share of the prompt the chosen worker
//! held.

use super::Chain;
use super::candidates::Target;
use std::time::Instant;

/// How a decision went: `hit` (the chosen worker holds part of the prompt),
/// `spill` (another worker held more, but load ruled it out), `miss`
/// (nobody held any), `fallback` (Valkey unreachable).
pub fn decision(ranked: &[Target], tracked: bool) -> &'static str {
    let Some(first) = ranked.first() else {
        return "no_worker";
    };
    if !tracked {
        "fallback"
    } else if ranked
        .iter()
        .any(|t| t.matched_blocks > first.matched_blocks)
    {
        "spill"
    } else if first.matched_blocks > 0 {
        "hit"
    } else {
        "miss"
    }
}

/// Records the time of one routing phase since `since`.
pub fn phase(name: &'static str, since: Instant) {
    metrics::histogram!("prefix_router_route_phase_seconds", "phase" => name)
        .record(since.elapsed().as_secs_f64());
}

pub fn record_outcome(model: &str, target: &Target, chain: &Chain) {
    metrics::counter!("prefix_router_requests_total", "model" => model.to_owned()).increment(1);
    if chain.prompt_tokens > 0 {
        let ratio = target.candidate.cached_tokens as f64 / chain.prompt_tokens as f64;
        metrics::histogram!("prefix_router_routed_prefix_ratio").record(ratio.min(1.0));
    }
}
