//! The steps of a disaggregated request's routing that the proxy
//! (`disagg`) and the endpoint picker (`pd_pick`) share: the plan from one
//! lookup, the decode worker's reservation, and the ranking of the prefill
//! workers (claimed and counted for the first).

use super::candidates::{Target, targets};
use super::pd_plan::PdPlan;
use super::prompts::Chain;
use super::{InFlightGuard, Proxy};
use crate::routing::RouteRequest;
use protocol::WorkerRole;

/// A disaggregated request's plan, with what its later steps need.
pub(super) struct Planned {
    pub plan: PdPlan,
    pub request: RouteRequest,
    pub block_size: usize,
}

impl Proxy {
    /// The plan of `chain` over the model's live workers (the decode
    /// candidates only among those `keep` accepts); `None` when the model
    /// is not disaggregated, or Valkey did not answer (route as usual).
    pub(super) async fn pd_plan(
        &self,
        model: &str,
        chain: &Chain,
        keep: impl Fn(&Target) -> bool,
    ) -> Option<Planned> {
        let block_size = self
            .prompts
            .pipelines()
            .get(model)
            .map_or(16, |p| p.hasher.block_size());
        // Matched as exactly as the routing call matches (gap probes),
        // among the decode candidates: what the decode pick and the skip
        // decision weigh.
        let decoders = |w: &state::WorkerInfo| w.role != WorkerRole::Prefill;
        let lookup = match self
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
        let mut all = targets(&lookup, block_size);
        self.remember(model, &all);
        all.retain(|t| t.role == WorkerRole::Prefill || keep(t));
        let request = RouteRequest {
            prompt_tokens: chain.prompt_tokens,
            prefix_key: chain.hashes.first().map_or(0, |h| h.0),
        };
        let cfg = self.atomic.unwrap_or_default();
        let plan = PdPlan::new(&all, &cfg, &request, self.pd_skip_share)?;
        Some(Planned {
            plan,
            request,
            block_size,
        })
    }

    /// Claims the prompt's blocks for the plan's decode worker and counts
    /// it in flight, before the prefill runs, so that other routers see the
    /// reservation. Skipping the prefill, it computes the uncached prompt;
    /// else it receives the KV and computes none.
    pub(super) async fn reserve_decode(
        &self,
        model: &str,
        chain: &Chain,
        plan: &PdPlan,
        decode: &Target,
    ) -> InFlightGuard {
        let tokens = if plan.skip {
            uncached(chain, decode)
        } else {
            0
        };
        let counted = self.assign_with(model, decode, chain, tokens).await;
        InFlightGuard::new(
            self.store.clone(),
            model,
            &decode.candidate.worker_id,
            counted,
        )
    }

    /// The prefill workers, best first by `--pd-prefill-policy`: the
    /// cache-aware one chosen, claimed and counted by the atomic step
    /// restricted to them (`assigned`), or ranked by load for the caller to
    /// claim. `None` when the atomic step failed.
    pub(super) async fn rank_prefill(
        &self,
        model: &str,
        chain: &Chain,
        planned: &Planned,
    ) -> Option<Vec<Target>> {
        let atomic = self
            .atomic
            .as_ref()
            .filter(|_| self.pd_prefill == crate::routing::PrefillPolicy::CacheAware);
        let Some(cfg) = atomic else {
            let all = planned.plan.prefill.clone();
            return Some(self.order(self.prefill_policy(), &planned.request, all));
        };
        let within = planned.plan.prefill_ids();
        match self
            .route_and_claim(
                model,
                chain,
                cfg,
                &planned.request,
                planned.block_size,
                &within,
            )
            .await
        {
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
}

/// The prompt tokens `target` does not hold.
pub(super) fn uncached(chain: &Chain, target: &Target) -> u64 {
    chain
        .prompt_tokens
        .saturating_sub(target.candidate.cached_tokens)
}

/// Counts one disaggregated request by the path it took.
pub(super) fn count_path(prefilled: bool, skipped: bool) {
    let path = match (prefilled, skipped) {
        (true, _) => "disaggregated",
        (false, true) => "skip_prefill",
        (false, false) => "decode_only",
    };
    metrics::counter!("prefix_router_pd_requests_total", "path" => path).increment(1);
}
