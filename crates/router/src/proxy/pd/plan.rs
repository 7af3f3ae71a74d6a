//! [`PdPlan`]: the decode half of a disaggregated request's routing, and
//! whether it needs a prefill worker at all, from one read-only lookup of
//! the model's live workers. The prefill half is the atomic cache-aware
//! step over the prefill workers (`Serving`); explain shows both.

use serde_json::{Value, json};

use crate::proxy::decision::Target;
use crate::routing::{
    CacheAwareConfig, Candidate, PrefillPolicy, RouteRequest, decode_cost, rank_decode,
};
use protocol::WorkerRole;

/// How a disaggregated request goes, before its prefill worker is chosen.
pub struct PdPlan {
    /// Decode workers (and colocated ones, which can take a remote
    /// prefill's KV too), best first.
    pub decode: Vec<Target>,
    /// The live prefill workers, in lookup order.
    pub prefill: Vec<Target>,
    /// The chosen decode worker holds more than the skip share of the
    /// prompt: it computes the rest itself, without a prefill worker.
    pub skip: bool,
    /// Why the prefill is skipped or not, for logs and explain.
    pub why: String,
    /// `decode`'s costs, in its order (explain).
    costs: Vec<f64>,
}

/// Whether a model whose live workers have `roles` is served disaggregated:
/// it has a prefill worker and a decode worker. A model of colocated
/// workers only (every model before roles) is routed as it always was.
pub fn disaggregated(roles: impl IntoIterator<Item = WorkerRole>) -> bool {
    let (mut prefill, mut decode) = (false, false);
    for role in roles {
        prefill |= role == WorkerRole::Prefill;
        decode |= role == WorkerRole::Decode;
    }
    prefill && decode
}

impl PdPlan {
    /// The plan over `all` live workers (a lookup's targets); `None` when
    /// the model is not [`disaggregated`]. `share` is
    /// `--pd-skip-prefill-share`.
    pub fn new(
        all: &[Target],
        cfg: &CacheAwareConfig,
        request: &RouteRequest,
        share: f64,
    ) -> Option<PdPlan> {
        if !disaggregated(all.iter().map(|t| t.role)) {
            return None;
        }
        let (prefill, decoders): (Vec<Target>, Vec<Target>) = all
            .iter()
            .cloned()
            .partition(|t| t.role == WorkerRole::Prefill);
        let candidates: Vec<Candidate> = decoders.iter().map(|t| t.candidate.clone()).collect();
        let order = rank_decode(cfg, request, &candidates);
        let costs = order
            .iter()
            .map(|&i| decode_cost(cfg, request, &candidates[i]))
            .collect();
        let mut slots: Vec<Option<Target>> = decoders.into_iter().map(Some).collect();
        let decode: Vec<Target> = order
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
            .collect();
        let held = decode.first().map_or(0, |d| d.candidate.cached_tokens);
        let prompt = request.prompt_tokens;
        let skip = crate::routing::skip_prefill(share, prompt, held);
        let why = if skip {
            format!(
                "skip prefill: the decode worker holds {held} of the prompt's {prompt} tokens, \
                 more than the skip share {share}; it computes the rest itself"
            )
        } else {
            format!(
                "prefill first: the decode worker holds {held} of the prompt's {prompt} tokens, \
                 not more than the skip share {share}; a prefill worker computes the prompt and \
                 hands its KV over"
            )
        };
        Some(PdPlan {
            decode,
            prefill,
            skip,
            why,
            costs,
        })
    }

    /// The ids of the prefill workers (the atomic step's allowed set).
    pub fn prefill_ids(&self) -> Vec<String> {
        self.prefill
            .iter()
            .map(|t| t.candidate.worker_id.clone())
            .collect()
    }

    /// Explain's view of the plan, with the prefill worker the cache-aware
    /// policy would choose among [`prefill`](Self::prefill) (`None` when
    /// skipped).
    pub fn explain(
        &self,
        prefill_pick: Option<(&Target, f64)>,
        share: f64,
        policy: PrefillPolicy,
    ) -> Value {
        let decode = self.decode.first().map(|d| {
            json!({
                "worker_id": d.candidate.worker_id,
                "matched_tokens": d.candidate.cached_tokens,
                "cost_tokens": self.costs.first(),
                "reason": "the least decode cost: prompt tokens it lacks, batch occupancy \
                           and KV usage, under the load bound",
            })
        });
        let prefill = prefill_pick.filter(|_| !self.skip).map(|(p, cost)| {
            json!({
                "worker_id": p.candidate.worker_id,
                "matched_tokens": p.candidate.cached_tokens,
                "prefill_tokens": p.candidate.prefill_tokens,
                "score_tokens": cost,
                "policy": policy.name(),
                "reason": match policy {
                    PrefillPolicy::CacheAware => "cache-aware among the prefill workers: \
                        matched prefix against the prefill queued on each",
                    PrefillPolicy::LeastLoaded => "the least prefill queued among the prefill \
                        workers, caches ignored (--pd-prefill-policy least_loaded)",
                },
            })
        });
        let ranking: Vec<Value> = self
            .decode
            .iter()
            .zip(&self.costs)
            .map(|(d, cost)| {
                json!({
                    "worker_id": d.candidate.worker_id,
                    "role": d.role,
                    "matched_tokens": d.candidate.cached_tokens,
                    "cost_tokens": cost,
                })
            })
            .collect();
        json!({
            "mode": "disaggregated",
            "skip_prefill": self.skip,
            "skip_prefill_share": share,
            "why": self.why,
            "prefill": prefill,
            "decode": decode,
            "decode_ranking": ranking,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::req;

    fn target(id: &str, role: WorkerRole, cached: u64) -> Target {
        Target {
            candidate: Candidate {
                worker_id: id.into(),
                cached_tokens: cached,
                ..Candidate::default()
            },
            url: format!("http://{id}"),
            matched_blocks: (cached / 16) as usize,
            assigned: false,
            prefill_tokens: 0,
            role,
        }
    }

    #[test]
    fn only_a_model_with_both_halves_is_disaggregated() {
        use WorkerRole::*;
        assert!(!disaggregated([Both, Both]));
        assert!(!disaggregated([Prefill, Both]));
        assert!(!disaggregated([Decode, Decode]));
        assert!(disaggregated([Prefill, Decode, Both]));
        let colocated = [target("a", Both, 0), target("b", Both, 64)];
        let cfg = CacheAwareConfig::default();
        assert!(PdPlan::new(&colocated, &cfg, &req(100), 0.8).is_none());
    }

    #[test]
    fn the_decode_holding_most_of_the_prompt_skips_the_prefill() {
        use WorkerRole::*;
        let all = [
            target("p", Prefill, 1000),
            target("d0", Decode, 0),
            target("d1", Decode, 960),
        ];
        let cfg = CacheAwareConfig::default();
        let plan = PdPlan::new(&all, &cfg, &req(1000), 0.8).unwrap();
        assert_eq!(plan.decode[0].candidate.worker_id, "d1");
        assert!(plan.skip, "{}", plan.why);
        assert_eq!(plan.prefill_ids(), ["p"]);
        let plan = PdPlan::new(&all, &cfg, &req(2000), 0.8).unwrap();
        assert!(!plan.skip, "{}", plan.why);
        let e = plan.explain(Some((&all[0], 1000.0)), 0.8, PrefillPolicy::CacheAware);
        assert_eq!(e["prefill"]["worker_id"], "p");
        assert_eq!(e["decode"]["worker_id"], "d1");
        assert_eq!(e["decode_ranking"].as_array().unwrap().len(), 2);
    }
}
