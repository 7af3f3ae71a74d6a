//! The decision's hook into LMCache (`crate::lmcache`, issue 31): what the
//! workers' LMCache hold of a prompt, asked once per decision under the
//! deadline, and the ranking of candidates widened by it. A prompt some
//! LMCache holds part of is ranked by the policy over a read-only probe
//! (the atomic script does not know LMCache's view), and the caller claims
//! and counts its first choice (`assign`), as for the other policies.

use std::sync::Arc;

use super::candidates::Target;
use super::{Chain, Decider, order};
use crate::lmcache::{self, Held, Outcome};
use crate::routing::RouteRequest;

impl Decider {
    /// What each worker's LMCache holds of `chain`'s prompt, and how the
    /// lookup went; empty without LMCache or without the prompt's tokens
    /// (shorter than the threshold).
    pub async fn lmcache_held(&self, chain: &Chain) -> Option<(Arc<[Held]>, Outcome)> {
        let lm = self.lmcache.as_ref()?;
        let tokens = chain.tokens.as_ref()?;
        Some(lm.lookup(tokens).await)
    }

    /// `targets` in the policy's order, equal costs broken by the workers'
    /// LMCache key counts (the cache-aware policy only).
    pub fn order_with_lmcache(&self, request: &RouteRequest, targets: Vec<Target>) -> Vec<Target> {
        order(
            self.policy.as_ref(),
            request,
            targets,
            |ranked, candidates| {
                if let (Some(lm), Some(cfg)) = (&self.lmcache, &self.atomic) {
                    lmcache::tie_break(ranked, candidates, cfg, request, &lm.key_counts());
                }
            },
        )
    }
}

/// Each target widened by what its worker's LMCache holds.
pub fn widen_targets(targets: &mut [Target], held: &[Held]) {
    for t in targets.iter_mut() {
        if let Some(h) = held.iter().find(|h| h.worker_id == t.candidate.worker_id) {
            lmcache::widen(&mut t.candidate, h);
        }
    }
}
