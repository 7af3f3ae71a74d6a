//! How a [`Pusher`](super::Pusher) behaves ([`PusherConfig`]) and where it
//! reads the worker's full state ([`BlockSource`]).

use std::time::Duration;

use super::client::WorkerIdentity;
use super::retry::Backoff;
use protocol::WorkerLoad;
use protocol::family::FamilyBlock;

/// Where the pusher reads the worker's full state.
///
/// Contract: [`snapshot`](Self::snapshot) must reflect at least every
/// report made to the handle *before* it is called. The simplest way is to
/// report events while holding the lock that `snapshot` takes.
/// Both methods run on the pusher task and should return quickly.
pub trait BlockSource: Send + Sync + 'static {
    /// Every block the worker caches now (with its family), for a
    /// destructive sync.
    fn snapshot(&self) -> Vec<FamilyBlock>;
    /// The load to send with a heartbeat; `None` to send none.
    fn load(&self) -> Option<WorkerLoad>;
}

/// How a [`Pusher`](super::Pusher) behaves.
#[derive(Debug, Clone)]
pub struct PusherConfig {
    /// Who the worker is.
    pub identity: WorkerIdentity,
    /// How often pending reports are sent (the fleet's fast path).
    pub flush_interval: Duration,
    /// How often a full snapshot is sent.
    pub sync_interval: Duration,
    /// How often the lease is renewed (keep well under the fleet's
    /// `--worker-lease`, 15 s by default).
    pub heartbeat_interval: Duration,
    /// Most distinct hashes pending between flushes; past it they are
    /// dropped and a full resync is sent instead.
    pub max_pending: usize,
    /// Delays after failed calls.
    pub backoff: Backoff,
    /// Fault injection: probability of leaving an evicted hash unreported.
    pub drop_evictions: f64,
    /// Seed of the fault injection's random numbers.
    pub seed: u64,
    /// Start paused (nothing is sent until resumed).
    pub paused: bool,
    /// The family depth the worker's families are computed with, sent with
    /// each heartbeat (`protocol::family`).
    pub family_blocks: Option<usize>,
}

impl PusherConfig {
    /// The defaults for `identity`: flush every 100 ms, sync every 5 s,
    /// heartbeat every 1 s, at most 1 Mi pending hashes, backoff 200 ms → 5 s.
    pub fn new(identity: WorkerIdentity) -> Self {
        PusherConfig {
            identity,
            flush_interval: Duration::from_millis(100),
            sync_interval: Duration::from_secs(5),
            heartbeat_interval: Duration::from_secs(1),
            max_pending: 1 << 20,
            backoff: Backoff {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(5),
            },
            drop_evictions: 0.0,
            seed: 0,
            paused: false,
            family_blocks: None,
        }
    }
}
