//! Housekeeping run by every router: lease expiry, purges, stalled syncs.

use super::ttl::ms;
use super::{Lane, ScriptName, StateError, StateStore};

/// What one gc pass over a model did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Incarnations whose lease had expired, moved to the purge queue.
    pub expired_workers: u64,
    /// Routers whose lease had expired; their in-flight counts dropped.
    pub dead_routers: u64,
    /// Expired entries removed from live workers.
    pub swept_entries: u64,
    /// Entries of dead incarnations removed.
    pub purged_entries: u64,
    /// Stalled sync patches this pass finished.
    pub resumed_syncs: u64,
    /// The model had no worker for the grace period and was forgotten.
    pub forgotten: bool,
}

impl StateStore {
    /// One bounded gc step for `model`, then purge batches until the queue is
    /// empty or `max_purge_steps` batches ran. Safe on every router at once.
    /// A sharded model runs it in every part; it is forgotten once every
    /// part found itself empty for the grace (they empty together: leases
    /// are renewed in all of them at once).
    pub async fn gc(&self, model: &str, max_purge_steps: usize) -> Result<GcReport, StateError> {
        let parts = self.parts(model)?;
        let mut total = GcReport::default();
        let mut forgotten = 0;
        for part in parts.iter() {
            let r = self.gc_part(part, max_purge_steps).await?;
            total.expired_workers += r.expired_workers;
            total.dead_routers += r.dead_routers;
            total.swept_entries += r.swept_entries;
            total.purged_entries += r.purged_entries;
            total.resumed_syncs += r.resumed_syncs;
            forgotten += usize::from(r.forgotten);
        }
        if forgotten == parts.len() {
            self.forget_model(model).await?;
            total.forgotten = true;
        }
        metrics::counter!("prefix_router_entries_total", "op" => "gc_sweep")
            .increment(total.swept_entries);
        metrics::counter!("prefix_router_entries_total", "op" => "purge")
            .increment(total.purged_entries);
        Ok(total)
    }

    /// [`gc`](Self::gc) of one part; `forgotten` when it deleted the part's
    /// keys.
    async fn gc_part(&self, model: &str, max_purge_steps: usize) -> Result<GcReport, StateError> {
        let budget = self.limits().sweep_budget.to_string();
        let stall = ms(self.ttls().patch_stall);
        let forget = ms(self.model_limits().grace);
        let reply: Vec<u64> = self
            .run(
                Lane::Bulk,
                ScriptName::Gc,
                model,
                &[&budget, &stall, &forget],
            )
            .await?;
        let mut report = GcReport {
            expired_workers: reply.first().copied().unwrap_or(0),
            dead_routers: reply.get(1).copied().unwrap_or(0),
            swept_entries: reply.get(2).copied().unwrap_or(0),
            ..GcReport::default()
        };
        if reply.get(3) == Some(&1) {
            report.forgotten = true;
            return Ok(report);
        }
        for &idx in reply.iter().skip(4) {
            tracing::info!(model, idx, "resuming a stalled sync patch");
            self.sync_patch(model, idx).await?;
            report.resumed_syncs += 1;
        }
        for _ in 0..max_purge_steps {
            let (removed, queued) = self.purge_part(model).await?;
            report.purged_entries += removed;
            if queued == 0 {
                break;
            }
        }
        Ok(report)
    }

    /// One purge batch (in every part); returns (entries removed,
    /// incarnations still queued).
    pub async fn purge(&self, model: &str) -> Result<(u64, u64), StateError> {
        let parts = self.parts(model)?;
        let (mut removed, mut queued) = (0, 0);
        for part in parts.iter() {
            let (r, q) = self.purge_part(part).await?;
            removed += r;
            queued += q;
        }
        Ok((removed, queued))
    }

    async fn purge_part(&self, part: &str) -> Result<(u64, u64), StateError> {
        let budget = self.limits().sweep_budget.to_string();
        self.run(Lane::Bulk, ScriptName::Purge, part, &[&budget])
            .await
    }

    /// Loads every script on the server now (they also load on demand).
    pub async fn load_scripts(&self) -> Result<(), StateError> {
        let scripts = &self.inner.scripts;
        self.inner
            .conns
            .with_bulk(|mut c| async move { scripts.load_all(&mut c).await })
            .await
    }
}
