//! Where a batch's sequence number stands relative to what was applied.
//!
//! vLLM numbers batches from 0 per publisher, so a restarted engine starts
//! again at 0. A batch seen twice (live after a replay that already gave it)
//! has the same number *and* timestamp as the one applied; a restarted
//! engine's batch does not, which tells the two apart.

use std::collections::VecDeque;

/// How many applied (seq, ts) pairs are remembered to recognise duplicates.
const REMEMBERED: usize = 16_384;

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqStep {
    /// The next batch (or the first one seen): apply it.
    Next,
    /// Batches `from..seq` were missed: fill them from the replay socket
    /// before applying this one.
    Gap {
        /// First missing sequence number.
        from: u64,
    },
    /// Already applied: skip it.
    Duplicate,
    /// The numbering went back: the engine restarted with an empty cache.
    Restart,
}

/// Tracks the applied sequence numbers of one engine.
#[derive(Debug, Default)]
pub struct SeqTracker {
    next: Option<u64>,
    applied: VecDeque<(u64, u64)>,
}

impl SeqTracker {
    /// A tracker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The sequence number expected next, if any batch was applied.
    pub fn expected(&self) -> Option<u64> {
        self.next
    }

    /// Classifies batch `seq` with timestamp `ts` (compared bit for bit).
    pub fn step(&self, seq: u64, ts: f64) -> SeqStep {
        let Some(next) = self.next else {
            return SeqStep::Next;
        };
        if seq == next {
            return SeqStep::Next;
        }
        if seq > next {
            return SeqStep::Gap { from: next };
        }
        if self
            .applied
            .iter()
            .any(|&(s, t)| s == seq && t == ts.to_bits())
        {
            SeqStep::Duplicate
        } else {
            SeqStep::Restart
        }
    }

    /// Whether batch `seq` with timestamp `ts` is one this tracker applied
    /// (`None` when `seq` is too old to tell). A replay that disagrees on
    /// an applied batch comes from another engine (a restart).
    pub fn was_applied(&self, seq: u64, ts: f64) -> Option<bool> {
        self.applied
            .iter()
            .rev()
            .find(|&&(s, _)| s == seq)
            .map(|&(_, t)| t == ts.to_bits())
    }

    /// Records batch `seq` as applied.
    pub fn applied(&mut self, seq: u64, ts: f64) {
        self.next = Some(seq.saturating_add(1));
        if self.applied.len() == REMEMBERED {
            self.applied.pop_front();
        }
        self.applied.push_back((seq, ts.to_bits()));
    }

    /// Forgets everything (after a resync).
    pub fn reset(&mut self) {
        self.next = None;
        self.applied.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_gaps_duplicates_and_restarts() {
        let mut t = SeqTracker::new();
        assert_eq!(t.step(5, 1.0), SeqStep::Next);
        t.applied(5, 1.0);
        assert_eq!(t.step(6, 1.1), SeqStep::Next);
        t.applied(6, 1.1);
        assert_eq!(t.step(9, 1.4), SeqStep::Gap { from: 7 });
        assert_eq!(t.step(6, 1.1), SeqStep::Duplicate);
        assert_eq!(t.step(6, 9.0), SeqStep::Restart);
        assert_eq!(t.step(0, 9.0), SeqStep::Restart);
        t.reset();
        assert_eq!(t.step(0, 9.0), SeqStep::Next);
    }
}
