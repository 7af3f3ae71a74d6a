//! [`Proxy::pick`] for a disaggregated model, as llm-d's P/D runs under the
//! Gateway API Inference Extension: the gateway sends the request to the
//! decode worker (the destination), whose sidecar first sends it to the
//! prefill worker the picker names in [`PREFILLER_HEADER`], then decodes
//! with the prefill's KV. The picker makes both picks as the proxy does
//! (`disagg`), and names no prefill worker when the decode worker holds
//! the prompt beyond the skip share.

use super::InFlightGuard;
use super::Proxy;
use super::candidates::Target;
use super::pd_steps::{count_path, uncached};
use super::pick::Pick;
use super::prompts::Chain;
use super::ranking::UrlFilter;

pub use protocol::headers::PREFILLER_HEADER;

/// The prefill half of a disaggregated pick.
pub(super) struct PrefillLeg {
    /// The prefill worker, or `None` when the decode worker computes the
    /// prompt itself (skipped, or no prefill worker could be claimed).
    pub target: Option<Target>,
    /// Its count, until the decode worker's first byte: the sidecar waits
    /// for the prefill's answer before it sends the decode request.
    pub guard: Option<InFlightGuard>,
}

/// What [`Proxy::pick_disaggregated`] did with a chain.
pub(super) enum PdPicked {
    /// Both picks, claimed and counted.
    Picked(Box<Pick>),
    /// The model is not served disaggregated (or Valkey did not answer):
    /// pick as usual.
    Not(Chain),
}

impl Proxy {
    /// Picks the decode worker (among those `allowed` accepts: the
    /// gateway's subset names destinations) and, unless skipped, the
    /// prefill worker, claiming and counting both as the proxy does.
    pub(super) async fn pick_disaggregated(
        &self,
        model: &str,
        chain: Chain,
        allowed: Option<&UrlFilter<'_>>,
    ) -> PdPicked {
        let keep = |t: &Target| allowed.is_none_or(|a| a(&t.url));
        let Some(planned) = self.pd_plan(model, &chain, keep).await else {
            return PdPicked::Not(chain);
        };
        let plan = &planned.plan;
        let Some(decode) = plan.decode.first() else {
            return PdPicked::Not(chain);
        };
        let mut guard = self.reserve_decode(model, &chain, plan, decode).await;
        let mut leg = PrefillLeg {
            target: None,
            guard: None,
        };
        if !plan.skip {
            let first = self
                .rank_prefill(model, &chain, &planned)
                .await
                .and_then(|ranked| ranked.into_iter().next());
            if let Some(target) = first {
                let counted = self.count(model, &target, &chain, true).await;
                let worker = &target.candidate.worker_id;
                leg.guard = Some(InFlightGuard::new(
                    self.store.clone(),
                    model,
                    worker,
                    counted,
                ));
                leg.target = Some(target);
            } else {
                // The decode worker computes the prompt itself.
                guard.add_prefill(uncached(&chain, decode));
            }
        }
        count_path(leg.target.is_some(), plan.skip);
        tracing::debug!(model, decode = %decode.candidate.worker_id, why = %plan.why, "disaggregated pick");
        let mut ranked = planned.plan.decode;
        ranked.truncate(self.max_attempts);
        PdPicked::Picked(Box::new(Pick::disaggregated(
            model, chain, ranked, guard, leg,
        )))
    }
}
