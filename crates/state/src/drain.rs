//! Graceful drain: a live worker marked draining (`drain.lua`) stays
//! registered and keeps serving what it has, but routing sends it nothing
//! new; routers move the answers still running on it at its drain
//! deadline (`drains.lua` lists them). The mark ends with the incarnation
//! (a deregistration, a lapsed lease) or when cleared.

use std::time::Duration;

use protocol::check_name;

use super::ttl::ms;
use super::{Lane, ScriptName, StateError, StateStore};

/// The longest drain deadline the store accepts (a day).
pub const MAX_DRAIN_DEADLINE: Duration = Duration::from_secs(24 * 3600);

/// A draining worker, as routers watch it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draining {
    /// The worker's id.
    pub worker_id: String,
    /// Its base URL.
    pub url: String,
    /// Time left to its drain deadline (zero once past).
    pub left: Duration,
}

impl StateStore {
    /// Marks `worker_id` draining with a deadline `deadline` from now (an
    /// earlier deadline already set stays). Returns the time left to the
    /// deadline, or `None` when the worker has no live lease.
    pub async fn drain(
        &self,
        model: &str,
        worker_id: &str,
        deadline: Duration,
    ) -> Result<Option<Duration>, StateError> {
        if deadline > MAX_DRAIN_DEADLINE {
            return Err(StateError::Invalid {
                what: "drain deadline",
                detail: format!("must be at most {MAX_DRAIN_DEADLINE:?}, got {deadline:?}"),
            });
        }
        let left = self.mark(model, worker_id, &ms(deadline)).await?;
        Ok(left.map(|l| Duration::from_millis(l.max(0) as u64)))
    }

    /// Clears `worker_id`'s drain mark: it is routed to again. False when
    /// the worker has no live lease.
    pub async fn undrain(&self, model: &str, worker_id: &str) -> Result<bool, StateError> {
        Ok(self.mark(model, worker_id, "-1").await?.is_some())
    }

    /// `drain.lua` in every part of the model; the first part's reply.
    async fn mark(
        &self,
        model: &str,
        worker_id: &str,
        ms: &str,
    ) -> Result<Option<i64>, StateError> {
        check_name("worker_id", worker_id)?;
        let parts = self.parts(model)?;
        let mut first = None;
        for (i, part) in parts.iter().enumerate() {
            let (idx, left): (u64, i64) = self
                .run(Lane::Bulk, ScriptName::Drain, part, &[worker_id, ms])
                .await?;
            if i == 0 {
                first = (idx != 0).then_some(left);
            }
        }
        Ok(first)
    }

    /// The draining workers of `model` (as its first part lists them).
    pub async fn drains(&self, model: &str) -> Result<Vec<Draining>, StateError> {
        let parts = self.parts(model)?;
        let reply: Vec<(String, String, i64)> = self
            .run(Lane::Bulk, ScriptName::Drains, &parts[0], &[])
            .await?;
        Ok(reply
            .into_iter()
            .map(|(worker_id, url, left)| Draining {
                worker_id,
                url,
                left: Duration::from_millis(left.max(0) as u64),
            })
            .collect())
    }
}
