//! The pure core of `sim-worker`, a simulated vLLM replica without a GPU: a
//! model of vLLM v1's prefix-cached KV block pool ([`PrefixCache`]) and of its
//! scheduler and timing ([`Engine`], [`TimeModel`]).
//!
//! Nothing here does I/O, sleeps or reads a clock: every operation that
//! depends on time takes `now` as a [`Duration`](std::time::Duration) since
//! an arbitrary epoch chosen by the caller (typically the server's start
//! `Instant`). That keeps the model deterministic and testable; the HTTP
//! layer drives it as described in [`engine`].
//!
//! Layers: [`engine`] (scheduling, timing) → [`cache`] (blocks, LRU, events)
//! → [`events`] (the event vocabulary and its replay).

pub mod cache;
pub mod engine;
pub mod events;
pub mod server;
pub mod timing;

pub use cache::{Allocation, CacheError, CacheStats, PrefixCache};
pub use engine::{
    Admission, Engine, EngineConfig, EngineCounters, EngineError, FinishReason, Finished, Gauges,
    SimRequest, Ticket,
};
pub use events::{CacheEvent, CacheReplay, ReplayError};
pub use timing::{TimeModel, TimeModelError};

/// Identifies one request inside a simulated engine. The HTTP layer assigns
/// them (e.g. from a counter) and maps its own request ids onto them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "req-{}", self.0)
    }
}

/// A broken internal invariant, found by a `check_invariants` method. Only
/// tests should ever see one; the message says which invariant and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invariant violated: {0}")]
pub struct InvariantViolation(pub String);
