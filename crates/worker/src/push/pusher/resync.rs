//! A resync of the worker's cache (turn step 4 in the parent's docs): the
//! pending window dropped, a snapshot taken, its digests checked, a repair
//! of the few buckets that differ, or the whole snapshot.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::Worker;
use crate::push::check::repairable;
use crate::push::error::PushError;
use crate::push::pending::ResyncReason;
use protocol::family::FamilyBlock;

impl Worker {
    pub(super) async fn sync(&mut self, due: Option<ResyncReason>) {
        // Drop the window first, then snapshot: see the module docs.
        self.shared.pending().begin_resync();
        let mut snapshot = self.source.snapshot();
        snapshot.sort_unstable();
        snapshot.dedup();
        let reason = due.map_or("periodic", ResyncReason::as_str);
        // The digests first: an unchanged set costs the fleet one comparison
        // instead of a walk of the whole snapshot, and a few changed buckets
        // a repair of those alone.
        let settled = match self.sync_by_digests(&snapshot).await {
            Ok(settled) => settled,
            Err(e) => {
                self.failed("sync_check", e);
                return;
            }
        };
        if let Some(outcome) = settled {
            tracing::debug!(reason, outcome, hashes = snapshot.len(), "fleet in sync");
            self.shared.stats.syncs.fetch_add(1, Ordering::Relaxed);
            self.next_sync = Instant::now() + self.config.sync_interval;
            self.succeeded();
            return;
        }
        match self.client.sync(&self.config.identity, &snapshot).await {
            Ok(reply) => {
                tracing::debug!(
                    reason,
                    hashes = snapshot.len(),
                    active = reply.active,
                    chunks = reply.chunks,
                    "full snapshot committed"
                );
                self.shared.stats.syncs.fetch_add(1, Ordering::Relaxed);
                self.shared.stats.snapshots.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("prefix_router_push_total", "op" => "sync").increment(1);
                metrics::counter!("prefix_router_push_syncs_total", "reason" => reason)
                    .increment(1);
                metrics::counter!("prefix_router_push_hashes_total", "op" => "sync")
                    .increment(snapshot.len() as u64);
                self.next_sync = Instant::now() + self.config.sync_interval;
                self.succeeded();
            }
            Err(e) => {
                self.failed("sync", e);
            }
        }
    }

    /// The check, then a repair when few buckets differ: `Some("unchanged"
    /// | "repaired")` when the fleet now holds exactly `snapshot`, `None`
    /// when a full sync is due; the error of a fleet that does not know the
    /// worker (it must register again first).
    async fn sync_by_digests(
        &mut self,
        snapshot: &[FamilyBlock],
    ) -> Result<Option<&'static str>, PushError> {
        let who = &self.config.identity;
        let outcome = match self.client.sync_check(who, snapshot, self.shards).await {
            Ok(r) if r.unchanged => "unchanged",
            Ok(r) if repairable(&r.differing, self.shards) => {
                match self
                    .client
                    .sync_repair(who, snapshot, &r.differing, self.shards)
                    .await
                {
                    Ok(after) if after.unchanged => {
                        self.shared.stats.repairs.fetch_add(1, Ordering::Relaxed);
                        "repaired"
                    }
                    Ok(_) => "repair_short",
                    Err(e) => {
                        tracing::debug!(error = %e, "repair failed; sending the snapshot");
                        "repair_failed"
                    }
                }
            }
            Ok(_) => "differs",
            Err(e) if e.is_unknown_worker() => return Err(e),
            // A router without the check (an older version) or a hiccup:
            // the full sync settles it either way.
            Err(e) => {
                tracing::debug!(error = %e, "sync check failed; sending the snapshot");
                "failed"
            }
        };
        metrics::counter!("prefix_router_push_sync_checks_total", "outcome" => outcome)
            .increment(1);
        Ok(matches!(outcome, "unchanged" | "repaired").then_some(outcome))
    }
}
