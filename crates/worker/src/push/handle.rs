//! [`PusherHandle`]: how the engine side feeds a [`Pusher`](super::Pusher),
//! and [`PusherStatus`], what it has done so far.
//!
//! Every method returns at once: it only updates the pending window under
//! a short lock. It is safe to call them while holding the engine's own
//! lock, and that is the way to keep snapshots and reports consistent (see
//! [`BlockSource`](super::BlockSource)).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::Notify;

use super::pending::{Pending, ResyncReason};
use protocol::family::FamilyBlock;

/// Fault injection for tests: the eviction reports to drop.
#[derive(Debug)]
struct Faults {
    drop_evictions: f64,
    rng: StdRng,
}

/// Counters behind [`PusherStatus`].
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub heartbeats: AtomicU64,
    pub flushes: AtomicU64,
    pub syncs: AtomicU64,
    pub snapshots: AtomicU64,
    pub repairs: AtomicU64,
    pub failures: AtomicU64,
    pub resyncs: AtomicU64,
    pub dropped_fault: AtomicU64,
    pub dropped_overflow: AtomicU64,
    pub registered: AtomicBool,
    /// The incarnation + 1 (0: none yet).
    pub incarnation: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// What the pusher task and its handles share.
#[derive(Debug)]
pub(super) struct Shared {
    pub pending: Mutex<Pending>,
    faults: Mutex<Faults>,
    pub paused: AtomicBool,
    pub wake: Notify,
    pub stats: Stats,
}

impl Shared {
    pub fn new(max_pending: usize, drop_evictions: f64, seed: u64, paused: bool) -> Self {
        Shared {
            pending: Mutex::new(Pending::new(max_pending)),
            faults: Mutex::new(Faults {
                drop_evictions: clamp_probability(drop_evictions),
                rng: StdRng::seed_from_u64(seed),
            }),
            paused: AtomicBool::new(paused),
            wake: Notify::new(),
            stats: Stats::default(),
        }
    }

    /// The pending window; a poisoned lock is still usable (it holds plain
    /// data, and a resync repairs anything a panic left half done).
    pub fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes a full resync due; counts it when it was not already.
    pub fn schedule_resync(&self, reason: ResyncReason) {
        if self.pending().schedule_resync(reason) {
            self.stats.resyncs.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("prefix_router_push_resyncs_total", "reason" => reason.as_str())
                .increment(1);
            tracing::debug!(reason = reason.as_str(), "full resync scheduled");
        }
    }

    fn record(&self, hashes: &[FamilyBlock], present: bool) {
        let dropped = self.pending().record(hashes, present);
        if dropped > 0 {
            self.stats
                .dropped_overflow
                .fetch_add(dropped as u64, Ordering::Relaxed);
            self.stats.resyncs.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("prefix_router_push_dropped_hashes_total", "reason" => "overflow")
                .increment(dropped as u64);
            metrics::counter!("prefix_router_push_resyncs_total", "reason" => ResyncReason::Overflow.as_str())
                .increment(1);
            tracing::warn!(
                dropped,
                "pending reports over their bound; dropped for a full resync"
            );
            self.wake.notify_one();
        }
    }
}

fn clamp_probability(p: f64) -> f64 {
    if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) }
}

/// Feeds a running [`Pusher`](super::Pusher); cheap to clone.
#[derive(Debug, Clone)]
pub struct PusherHandle {
    pub(super) shared: Arc<Shared>,
}

impl PusherHandle {
    /// Blocks that became cached (vLLM's `BlockStored`), with their
    /// families (`protocol::family`).
    pub fn stored(&self, hashes: &[FamilyBlock]) {
        if !hashes.is_empty() && !self.shared.paused.load(Ordering::Acquire) {
            self.shared.record(hashes, true);
        }
    }

    /// Blocks that were evicted (vLLM's `BlockRemoved`). The eviction-drop
    /// fault, if set, loses each hash with its probability here.
    pub fn evicted(&self, hashes: &[FamilyBlock]) {
        if hashes.is_empty() || self.shared.paused.load(Ordering::Acquire) {
            return;
        }
        let kept: Vec<FamilyBlock> = {
            let mut faults = self.shared.faults.lock().unwrap_or_else(|p| p.into_inner());
            if faults.drop_evictions <= 0.0 {
                hashes.to_vec()
            } else {
                let p = faults.drop_evictions;
                hashes
                    .iter()
                    .copied()
                    .filter(|_| !faults.rng.random_bool(p))
                    .collect()
            }
        };
        let dropped = (hashes.len() - kept.len()) as u64;
        if dropped > 0 {
            self.shared
                .stats
                .dropped_fault
                .fetch_add(dropped, Ordering::Relaxed);
            metrics::counter!("prefix_router_push_dropped_hashes_total", "reason" => "fault")
                .increment(dropped);
        }
        if !kept.is_empty() {
            self.shared.record(&kept, false);
        }
    }

    /// The engine dropped its whole cache (vLLM's `AllBlocksCleared`): the
    /// next sync, soon, sends the (now empty or nearly) snapshot.
    pub fn cleared(&self) {
        self.shared.schedule_resync(ResyncReason::Cleared);
        self.shared.wake.notify_one();
    }

    /// Sends a full snapshot as soon as the fleet can take it.
    pub fn request_resync(&self) {
        self.shared.schedule_resync(ResyncReason::Requested);
        self.shared.wake.notify_one();
    }

    /// Stops (`true`) or resumes all reporting, heartbeats included; the
    /// lease then runs out like a dead worker's. Reports made while paused
    /// are dropped; resuming sends a heartbeat and a full snapshot at once.
    pub fn set_paused(&self, paused: bool) {
        if paused {
            self.shared.paused.store(true, Ordering::Release);
            return;
        }
        // Scheduled before reports are let in again: everything dropped
        // during the pause is then covered by the snapshot.
        if self.shared.paused.load(Ordering::Acquire) {
            self.shared.schedule_resync(ResyncReason::Resumed);
        }
        self.shared.paused.store(false, Ordering::Release);
        self.shared.wake.notify_one();
    }

    /// Whether reporting is paused.
    pub fn is_paused(&self) -> bool {
        self.shared.paused.load(Ordering::Acquire)
    }

    /// Fault injection: each evicted hash is left unreported with
    /// probability `p` (clamped to 0..=1; 0 turns it off).
    pub fn set_drop_evictions(&self, p: f64) {
        let mut faults = self.shared.faults.lock().unwrap_or_else(|p| p.into_inner());
        faults.drop_evictions = clamp_probability(p);
    }

    /// The eviction-drop probability in force.
    pub fn drop_evictions(&self) -> f64 {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drop_evictions
    }

    /// Counters and state, for status pages and tests.
    pub fn status(&self) -> PusherStatus {
        let s = &self.shared.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (pending, resync_due) = {
            let p = self.shared.pending();
            (p.len(), p.resync_due().map(|r| r.as_str()))
        };
        PusherStatus {
            registered: s.registered.load(Ordering::Relaxed),
            incarnation: get(&s.incarnation).checked_sub(1),
            paused: self.is_paused(),
            heartbeats: get(&s.heartbeats),
            flushes: get(&s.flushes),
            syncs: get(&s.syncs),
            snapshots: get(&s.snapshots),
            repairs: get(&s.repairs),
            failures: get(&s.failures),
            resyncs: get(&s.resyncs),
            dropped_evictions: get(&s.dropped_fault),
            dropped_overflow: get(&s.dropped_overflow),
            pending,
            resync_due,
            drop_evictions: self.drop_evictions(),
            last_error: s.last_error.lock().map(|e| e.clone()).unwrap_or_default(),
        }
    }
}

/// A snapshot of a pusher's state and counters (since start).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PusherStatus {
    /// Whether the last heartbeat succeeded.
    pub registered: bool,
    /// The incarnation the fleet gave the worker, once known.
    pub incarnation: Option<u64>,
    /// Whether reporting is paused.
    pub paused: bool,
    /// Heartbeats the fleet accepted.
    pub heartbeats: u64,
    /// Flushes of stored/evicted reports the fleet accepted.
    pub flushes: u64,
    /// Syncs completed: digest checks that found the fleet equal, repairs,
    /// and full snapshots committed.
    pub syncs: u64,
    /// Full snapshots the fleet committed (the digests differed).
    pub snapshots: u64,
    /// Repairs that made the fleet equal (a few digest buckets differed).
    #[serde(default)]
    pub repairs: u64,
    /// Failed calls (each followed by a backoff).
    pub failures: u64,
    /// Full resyncs scheduled (besides the periodic syncs).
    pub resyncs: u64,
    /// Evicted hashes left unreported by the fault switch.
    pub dropped_evictions: u64,
    /// Reported hashes dropped because the window outgrew its bound.
    pub dropped_overflow: u64,
    /// Distinct hashes waiting for the next flush.
    pub pending: usize,
    /// Why a full resync is due, if one is.
    pub resync_due: Option<&'static str>,
    /// The eviction-drop probability in force.
    pub drop_evictions: f64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}
