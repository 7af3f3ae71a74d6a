//! Claiming a prompt's blocks for a worker and counting the request in
//! flight on it, when the atomic routing step did not (retries, the other
//! policies, the decode half of a disaggregated request).

use super::candidates::Target;
use super::{Chain, Decider};

impl Decider {
    /// The request counted in flight on `target` (by the atomic step, or
    /// here when `tracked`): the prefill tokens counted with it, or `None`
    /// when it goes untracked.
    pub async fn count(
        &self,
        model: &str,
        target: &Target,
        chain: &Chain,
        tracked: bool,
    ) -> Option<u64> {
        if target.assigned {
            Some(target.prefill_tokens)
        } else if tracked {
            self.assign(model, target, chain, chain.uncached(target))
                .await
        } else {
            None
        }
    }

    /// Claims the blocks the target does not hold and counts the request
    /// with `prefill` prompt tokens it will compute (returned; a decode
    /// worker that receives the prompt's KV computes none); `None` when
    /// that failed (the request still goes, untracked).
    pub async fn assign(
        &self,
        model: &str,
        target: &Target,
        chain: &Chain,
        prefill: u64,
    ) -> Option<u64> {
        match self
            .store
            .assign_prefix(
                model,
                &target.candidate.worker_id,
                &chain.hashes,
                target.matched_blocks,
                prefill,
            )
            .await
        {
            Ok(_) => Some(prefill),
            Err(e) => {
                tracing::warn!(error = %e, "claim failed; request forwarded untracked");
                None
            }
        }
    }
}
