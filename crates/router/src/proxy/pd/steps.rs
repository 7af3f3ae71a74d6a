//! The steps of a disaggregated request's routing that the proxy
//! (`Serving`) and the endpoint picker (`pick`) share: the plan from one
//! probe, the decode worker's reservation, and the ranking of the prefill
//! workers (claimed and counted for the first).

use super::PdPlan;
use crate::proxy::InFlightGuard;
use crate::proxy::decision::{Chain, Decider, Target, order, targets, widen_targets};
use crate::routing::{LeastPrefill, Policy, PrefillPolicy, RouteRequest};
use protocol::WorkerRole;

/// A disaggregated request's plan, with what its later steps need.
pub struct Planned {
    pub plan: PdPlan,
    pub request: RouteRequest,
    /// Some worker's LMCache holds part of the prompt (the candidates
    /// are widened by it: `decision::widen_targets`).
    pub lmcache_held: bool,
}

/// The plan of `chain` over the model's live workers (the decode
/// candidates only among those `keep` accepts); `None` when the model is
/// not disaggregated, or Valkey did not answer (route as usual).
pub async fn plan(
    decide: &Decider,
    model: &str,
    chain: &Chain,
    keep: impl Fn(&Target) -> bool,
) -> Option<Planned> {
    // Matched as exactly as the routing call matches (gap probes), among
    // the decode candidates: what the decode pick and the skip decision
    // weigh.
    let decoders = |w: &state::WorkerInfo| w.role != WorkerRole::Prefill;
    let lookup = match decide
        .store
        .probe_with_gaps_among(model, &chain.hashes, decoders)
        .await
    {
        Ok(lookup) => lookup,
        Err(e) => {
            tracing::debug!(error = %e, model, "no lookup for a disaggregated route; routing as usual");
            return None;
        }
    };
    let mut all = targets(&lookup, chain.block_size);
    decide.known.remember(model, &all);
    all.retain(|t| t.role == WorkerRole::Prefill || keep(t));
    // What the workers' LMCache hold of the prompt counts for both picks
    // and the skip decision (a decode worker whose LMCache holds the
    // prompt loads it instead of prefilling).
    let held = decide.lmcache_held(chain).await.map(|(held, _)| held);
    let lmcache_held = held.as_ref().is_some_and(|h| !h.is_empty());
    if let Some(held) = &held {
        widen_targets(&mut all, held);
    }
    let request = chain.request();
    let cfg = decide.atomic.unwrap_or_default();
    let plan = PdPlan::new(&all, &cfg, &request, decide.pd.skip_share)?;
    Some(Planned {
        plan,
        request,
        lmcache_held,
    })
}

/// Claims the prompt's blocks for the plan's decode worker and counts it
/// in flight, before the prefill runs, so that other routers see the
/// reservation. Skipping the prefill, it computes the uncached prompt;
/// else it receives the KV and computes none.
pub async fn reserve_decode(
    decide: &Decider,
    model: &str,
    chain: &Chain,
    plan: &PdPlan,
    target: &Target,
) -> InFlightGuard {
    let tokens = if plan.skip { chain.uncached(target) } else { 0 };
    let counted = decide.assign(model, target, chain, tokens).await;
    decide.guard(model, &target.candidate.worker_id, counted)
}

/// The prefill workers, best first by `--pd-prefill-policy`: the
/// cache-aware one chosen, claimed and counted by the atomic step
/// restricted to them (`assigned`), or ranked by load for the caller to
/// claim. When some worker's LMCache holds part of the prompt, the
/// cache-aware policy ranks the plan's widened prefill candidates instead
/// (the atomic step does not know LMCache's view; equal costs go to the
/// worker whose LMCache holds more chunks) and the caller claims. `None`
/// when the atomic step failed.
pub async fn rank_prefill(
    decide: &Decider,
    model: &str,
    chain: &Chain,
    planned: &Planned,
) -> Option<Vec<Target>> {
    let atomic = decide
        .atomic
        .as_ref()
        .filter(|_| decide.pd.prefill == PrefillPolicy::CacheAware);
    let Some(cfg) = atomic else {
        let all = planned.plan.prefill.clone();
        return Some(order(
            prefill_policy(decide),
            &planned.request,
            all,
            |_, _| {},
        ));
    };
    if planned.lmcache_held {
        let all = planned.plan.prefill.clone();
        return Some(decide.order_with_lmcache(&planned.request, all));
    }
    let within = planned.plan.prefill_ids();
    match decide.route(model, chain, cfg, &within).await {
        Ok(ranked) => Some(
            ranked
                .into_iter()
                .filter(|t| t.role == WorkerRole::Prefill)
                .collect(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, model, "prefill pick failed; the decode worker prefills");
            None
        }
    }
}

/// What ranks prefill workers outside the atomic step: load alone under
/// `--pd-prefill-policy least_loaded`, else the router's policy.
pub fn prefill_policy(decide: &Decider) -> &dyn Policy {
    match decide.pd.prefill {
        PrefillPolicy::LeastLoaded => &LeastPrefill,
        PrefillPolicy::CacheAware => decide.policy.as_ref(),
    }
}

/// Counts one disaggregated request by the path it took.
pub fn count_path(prefilled: bool, skipped: bool) {
    let path = match (prefilled, skipped) {
        (true, _) => "disaggregated",
        (false, true) => "skip_prefill",
        (false, false) => "decode_only",
    };
    metrics::counter!("prefix_router_pd_requests_total", "path" => path).increment(1);
}
