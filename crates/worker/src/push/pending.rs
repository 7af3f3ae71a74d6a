//! [`Pending`]: the reports accumulated since the last flush, kept as a net
//! state per hash, and whether a full resync is due instead.
//!
//! Only the last report of a hash in a window matters: stored then evicted
//! is sent as an eviction, evicted then stored as a store. Within one flush
//! every hash is sent once, so the order of its events (one `events`
//! request, or the two older requests) does not matter. Reports are idempotent on the fleet's side, so a hash reported
//! again after a snapshot that already reflected it changes nothing.

use std::collections::HashMap;

use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;

/// Why a full resync was scheduled (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResyncReason {
    /// The pusher just started: the fleet may hold anything from before.
    Initial,
    /// The fleet registered a new incarnation (it forgot the worker).
    Registered,
    /// A call failed: the fleet may have missed a report, or be gone.
    PushFailed,
    /// The pending reports outgrew their bound and were dropped.
    Overflow,
    /// Reporting resumed after a pause.
    Resumed,
    /// The engine cleared its whole cache.
    Cleared,
    /// Someone asked (`PusherHandle::request_resync`).
    Requested,
}

impl ResyncReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ResyncReason::Initial => "initial",
            ResyncReason::Registered => "registered",
            ResyncReason::PushFailed => "push_failed",
            ResyncReason::Overflow => "overflow",
            ResyncReason::Resumed => "resumed",
            ResyncReason::Cleared => "cleared",
            ResyncReason::Requested => "requested",
        }
    }
}

/// The net reports of one flush window.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Blocks whose last report was a store.
    pub stored: Vec<FamilyBlock>,
    /// Blocks whose last report was an eviction.
    pub evicted: Vec<FamilyBlock>,
}

impl Batch {
    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty() && self.evicted.is_empty()
    }
}

/// Reports waiting for the next flush, bounded; see the module docs.
#[derive(Debug)]
pub struct Pending {
    /// hash → (present: true when stored last, false when evicted last;
    /// the block as last reported, with its family and tier).
    net: HashMap<BlockHash, (bool, FamilyBlock)>,
    max: usize,
    resync: Option<ResyncReason>,
}

impl Pending {
    /// At most `max` distinct hashes pending; a resync is due at first.
    pub fn new(max: usize) -> Self {
        Pending {
            net: HashMap::new(),
            max: max.max(1),
            resync: Some(ResyncReason::Initial),
        }
    }

    /// Records reports; `present` is true for stores. While a resync is due
    /// reports are not kept: the snapshot taken for it will reflect them.
    /// Returns the hashes dropped by an overflow (0 otherwise).
    pub fn record(&mut self, blocks: &[FamilyBlock], present: bool) -> usize {
        if self.resync.is_some() {
            return 0;
        }
        for b in blocks {
            self.net.insert(b.hash, (present, *b));
        }
        if self.net.len() <= self.max {
            return 0;
        }
        let dropped = self.net.len();
        self.schedule_resync(ResyncReason::Overflow);
        dropped
    }

    /// Drops everything pending and makes a full resync due, unless one is
    /// already; returns whether this call scheduled it.
    pub fn schedule_resync(&mut self, reason: ResyncReason) -> bool {
        self.net = HashMap::new();
        if self.resync.is_some() {
            return false;
        }
        self.resync = Some(reason);
        true
    }

    /// The due resync's reason, if one is due.
    pub fn resync_due(&self) -> Option<ResyncReason> {
        self.resync
    }

    /// Starts a resync: drops what is pending and clears the flag. The
    /// caller must take its snapshot after this, so that every report
    /// dropped here is reflected in it.
    pub fn begin_resync(&mut self) {
        self.net = HashMap::new();
        self.resync = None;
    }

    /// Takes the window's net reports for a flush.
    pub fn take(&mut self) -> Batch {
        let mut batch = Batch::default();
        for (_, (present, block)) in std::mem::take(&mut self.net) {
            if present {
                batch.stored.push(block);
            } else {
                batch.evicted.push(block);
            }
        }
        batch.stored.sort_unstable();
        batch.evicted.sort_unstable();
        batch
    }

    /// Distinct hashes pending.
    pub fn len(&self) -> usize {
        self.net.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.net.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: u64) -> FamilyBlock {
        FamilyBlock::unplaced(BlockHash(v))
    }

    fn ready(max: usize) -> Pending {
        let mut p = Pending::new(max);
        p.begin_resync();
        p
    }

    #[test]
    fn the_last_report_of_a_window_wins() {
        let mut p = ready(100);
        p.record(&[h(1), h(2)], true);
        p.record(&[h(1)], false); // stored then evicted: absent
        p.record(&[h(3)], false);
        p.record(&[h(3)], true); // evicted then stored: present
        let b = p.take();
        assert_eq!(b.stored, vec![h(2), h(3)]);
        assert_eq!(b.evicted, vec![h(1)]);
        assert!(p.take().is_empty());
    }

    #[test]
    fn reports_are_not_kept_while_a_resync_is_due() {
        let mut p = Pending::new(100);
        assert_eq!(p.resync_due(), Some(ResyncReason::Initial));
        p.record(&[h(1)], true);
        assert!(p.is_empty());
        p.begin_resync();
        assert_eq!(p.resync_due(), None);
        p.record(&[h(2)], true);
        assert!(p.schedule_resync(ResyncReason::PushFailed));
        assert!(!p.schedule_resync(ResyncReason::Requested));
        assert_eq!(p.resync_due(), Some(ResyncReason::PushFailed));
        assert!(p.is_empty());
    }

    #[test]
    fn overflow_drops_everything_and_schedules_a_resync() {
        let mut p = ready(3);
        assert_eq!(p.record(&[h(1), h(2), h(3)], true), 0);
        assert_eq!(p.record(&[h(1)], false), 0, "an update is not growth");
        assert_eq!(p.record(&[h(4)], true), 4);
        assert_eq!(p.resync_due(), Some(ResyncReason::Overflow));
        assert_eq!(p.len(), 0);
    }
}
