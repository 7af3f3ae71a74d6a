//! The endpoint picker's picks for a disaggregated model, as llm-d's P/D
//! runs under the Gateway API Inference Extension: the gateway sends the
//! request to the decode worker (the destination), whose sidecar first
//! sends it to the prefill worker the picker names in
//! [`PREFILLER_HEADER`](protocol::headers::PREFILLER_HEADER), then decodes
//! with the prefill's KV. The picker makes both picks as the proxy does
//! (`Serving`), and names no prefill worker when the decode worker holds
//! the prompt beyond the skip share.

use super::steps::{self, count_path};
use crate::proxy::InFlightGuard;
use crate::proxy::decision::{Chain, Decider, Target, UrlFilter};

/// The prefill half of a disaggregated pick.
pub struct PrefillLeg {
    /// The prefill worker, or `None` when the decode worker computes the
    /// prompt itself (skipped, or no prefill worker could be claimed).
    pub target: Option<Target>,
    /// Its count, until the decode worker's first byte: the sidecar waits
    /// for the prefill's answer before it sends the decode request.
    pub guard: Option<InFlightGuard>,
}

/// Both picks of a disaggregated request, claimed and counted.
pub struct PdPick {
    /// The decode workers, best first (at most `--max-attempts`).
    pub ranked: Vec<Target>,
    /// The first decode worker's count.
    pub guard: InFlightGuard,
    /// The prefill half.
    pub leg: PrefillLeg,
}

/// Picks the decode worker (among those `allowed` accepts: the gateway's
/// subset names destinations) and, unless skipped, the prefill worker,
/// claiming and counting both as the proxy does. `None`: the model is not
/// served disaggregated (or Valkey did not answer): pick as usual.
pub async fn pick(
    decide: &Decider,
    model: &str,
    chain: &Chain,
    allowed: Option<&UrlFilter<'_>>,
) -> Option<PdPick> {
    let keep = |t: &Target| allowed.is_none_or(|a| a(&t.url));
    let planned = steps::plan(decide, model, chain, keep).await?;
    let plan = &planned.plan;
    let decode = plan.decode.first()?;
    let mut guard = steps::reserve_decode(decide, model, chain, plan, decode).await;
    let mut leg = PrefillLeg {
        target: None,
        guard: None,
    };
    if !plan.skip {
        let first = steps::rank_prefill(decide, model, chain, &planned)
            .await
            .and_then(|ranked| ranked.into_iter().next());
        if let Some(target) = first {
            let counted = decide.count(model, &target, chain, true).await;
            leg.guard = Some(decide.guard(model, &target.candidate.worker_id, counted));
            leg.target = Some(target);
        } else {
            // The decode worker computes the prompt itself.
            guard.add_prefill(chain.uncached(decode));
        }
    }
    count_path(leg.target.is_some(), plan.skip);
    tracing::debug!(model, decode = %decode.candidate.worker_id, why = %plan.why, "disaggregated pick");
    let mut ranked = planned.plan.decode;
    ranked.truncate(decide.max_attempts);
    Some(PdPick { ranked, guard, leg })
}
