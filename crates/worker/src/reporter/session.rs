//! The reporter's event loop for one engine: receive batches, keep them in
//! order, fill gaps from the replay socket, and resynchronise when the
//! engine's history cannot be trusted.

use std::sync::{Arc, Mutex};

use crate::kv_events::{KvEventSubscriber, ReplayedBatch};
use protocol::family::FamilyBlock;
use protocol::kv_events::KvEventBatch;

use super::engine_blocks::{Applied, BlockDelta, EngineBlocks};
use super::sequence::{SeqStep, SeqTracker};

/// Where the reporter sends what it learns: the worker push protocol.
pub trait FleetSink: Send + Sync {
    /// Router hashes the engine now holds.
    fn stored(&self, hashes: &[FamilyBlock]);
    /// Router hashes the engine no longer holds.
    fn evicted(&self, hashes: &[FamilyBlock]);
    /// The engine's set must be sent in full (destructive sync) soon.
    fn resync(&self);
}

/// Counters a reporter exposes (also as metrics).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SessionStats {
    /// Batches applied (live or replayed).
    pub batches: u64,
    /// Gaps filled from the replay socket.
    pub gaps_filled: u64,
    /// Resynchronisations (start, restart, unfillable gap, clear).
    pub resyncs: u64,
    /// `BlockStored` events whose blocks could not be translated.
    pub unmappable: u64,
    /// Batches skipped as already applied.
    pub duplicates: u64,
}

/// One engine's reporter state, shared with the sink's snapshot source.
pub struct Session<S: FleetSink> {
    blocks: Arc<Mutex<EngineBlocks>>,
    tracker: SeqTracker,
    sink: S,
    stats: SessionStats,
}

impl<S: FleetSink> Session<S> {
    /// A session over `blocks` (whose snapshot the sink's full syncs read).
    pub fn new(blocks: Arc<Mutex<EngineBlocks>>, sink: S) -> Self {
        Session {
            blocks,
            tracker: SeqTracker::new(),
            sink,
            stats: SessionStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// Rebuilds the engine's set from scratch: forget everything, apply what
    /// the replay socket still buffers (a subset of the truth: blocks whose
    /// parents fell out of the buffer stay unknown), then ask for a full
    /// sync. Used at start, after a restart and after an unfillable gap.
    pub async fn resync(&mut self, sub: &KvEventSubscriber) {
        self.stats.resyncs += 1;
        metrics::counter!("prefix_router_reporter_resyncs_total").increment(1);
        self.with_blocks(EngineBlocks::clear);
        self.tracker.reset();
        // An engine that just restarted may not answer its replay socket
        // yet: a few tries before settling for the live stream alone.
        let mut replayed = sub.replay(0).await;
        for _ in 0..2 {
            if replayed.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            replayed = sub.replay(0).await;
        }
        match replayed {
            Ok(batches) => {
                for b in batches {
                    match b.batch {
                        Ok(batch) => self.apply(b.seq, &batch),
                        Err(e) => {
                            tracing::warn!(seq = b.seq, error = %e, "undecodable replayed batch; later blocks may be unknown");
                            self.tracker.reset();
                        }
                    }
                }
            }
            Err(e) => tracing::info!(error = %e, "no replay on resync; starting from live events"),
        }
        self.sink.resync();
    }

    /// Handles one live batch.
    pub async fn on_batch(&mut self, sub: &KvEventSubscriber, seq: u64, batch: &KvEventBatch) {
        match self.tracker.step(seq, batch.ts) {
            SeqStep::Next => self.apply(seq, batch),
            SeqStep::Duplicate => self.stats.duplicates += 1,
            SeqStep::Restart => {
                tracing::warn!(
                    seq,
                    "KV-event sequence went back: engine restarted; resynchronising"
                );
                self.resync(sub).await;
                if self.tracker.step(seq, batch.ts) == SeqStep::Next {
                    self.apply(seq, batch);
                }
            }
            SeqStep::Gap { from } => {
                if self.fill(sub, from, seq).await {
                    self.stats.gaps_filled += 1;
                    tracing::info!(
                        from,
                        to = seq - 1,
                        "filled a KV-event gap from the replay socket"
                    );
                } else {
                    tracing::warn!(
                        from,
                        to = seq - 1,
                        "KV-event gap could not be filled; resynchronising"
                    );
                    self.resync(sub).await;
                }
                match self.tracker.step(seq, batch.ts) {
                    SeqStep::Next => self.apply(seq, batch),
                    SeqStep::Duplicate => {}
                    // After a resync whose replay stopped short of `seq`:
                    // what it missed is unknown, so start over from here.
                    _ => {
                        self.tracker.reset();
                        self.apply(seq, batch);
                    }
                }
            }
        }
    }

    /// Applies replayed batches `from..to`; false if any is missing, or if
    /// the replay is not the continuation of what was applied: the replay
    /// starts one batch early, and that batch must be the one applied (a
    /// restarted engine that has already passed the old numbering has a
    /// different batch there).
    async fn fill(&mut self, sub: &KvEventSubscriber, from: u64, to: u64) -> bool {
        let Ok(batches) = sub.replay(from.saturating_sub(1)).await else {
            return false;
        };
        let mut expect = from;
        let mut anchored = from == 0;
        for ReplayedBatch { seq, batch, .. } in batches {
            let Ok(batch) = batch else {
                return false;
            };
            if seq + 1 == from {
                if self.tracker.was_applied(seq, batch.ts) != Some(true) {
                    tracing::warn!(
                        seq,
                        "replayed batch differs from the one applied: another engine"
                    );
                    return false;
                }
                anchored = true;
                continue;
            }
            if !anchored || seq != expect {
                return false;
            }
            if seq >= to {
                break;
            }
            self.apply(seq, &batch);
            expect += 1;
        }
        expect == to
    }

    fn apply(&mut self, seq: u64, batch: &KvEventBatch) {
        self.tracker.applied(seq, batch.ts);
        self.stats.batches += 1;
        let mut cleared = false;
        for event in &batch.events {
            let mut delta = BlockDelta::default();
            let applied = self.with_blocks(|b| b.apply(event, &mut delta));
            match applied {
                Applied::Cleared => cleared = true,
                Applied::Skipped(why) => {
                    self.stats.unmappable += 1;
                    metrics::counter!("prefix_router_reporter_unmappable_total").increment(1);
                    tracing::debug!(seq, reason = %why, "blocks not reported");
                }
                Applied::Changed | Applied::Ignored => {}
            }
            if !delta.stored.is_empty() {
                self.sink.stored(&delta.stored);
            }
            if !delta.removed.is_empty() {
                self.sink.evicted(&delta.removed);
            }
        }
        if cleared {
            self.stats.resyncs += 1;
            self.sink.resync();
        }
    }

    fn with_blocks<T>(&self, f: impl FnOnce(&mut EngineBlocks) -> T) -> T {
        let mut guard = self
            .blocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }
}
