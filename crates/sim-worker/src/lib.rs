//! `sim-worker`, a simulated vLLM replica without a GPU: a model of vLLM
//! v1's prefix-cached KV block pool ([`PrefixCache`]) and of its scheduler
//! and timing ([`Engine`], [`TimeModel`]), served over vLLM's OpenAI API
//! ([`server`]) and reported to a fleet as a real engine is.
//!
//! The model is pure: nothing in `engine`, `cache`, `events`, `greedy`, `timing` or
//! `transfer` does I/O, sleeps or reads a clock; every operation that depends on time
//! takes `now` as a [`Duration`](std::time::Duration) since an epoch the
//! caller chooses (the server's start `Instant`). That keeps it
//! deterministic and testable; the server drives it as [`engine`] describes.
//!
//! Layout (depends on `protocol`, `tokenize` and `worker`, never on the
//! router):
//!
//! * [`engine`]: admission, scheduling, prefill and decode timing.
//! * [`cache`]: the block pool, its LRU free queue, its CPU tier and events.
//! * [`events`]: the event vocabulary, the tiers ([`Medium`]) and replay.
//! * [`lmcache`]: LMCache's chunk keys and its controller's messages (what
//!   `--lmcache-controller` reports, issue 31).
//! * `greedy`: [`Vocabulary`], the answers' tokens as greedy decoding
//!   gives them (each a function of the prompt and the tokens before it).
//! * `timing`: [`TimeModel`], prefill and decode durations.
//! * `transfer`: [`KvTransferModel`], remote-prefill pulls and CPU-tier
//!   loads.
//! * [`server`]: HTTP (OpenAI routes, `/sim/*`, `/metrics`), push reports
//!   and KV events.
//!
//! Within: `server` → `engine` → `cache` → `events`.

pub mod cache;
pub mod engine;
pub mod events;
mod greedy;
pub mod lmcache;
pub mod server;
mod timing;
mod transfer;

pub use cache::{Allocation, CacheError, CacheStats, PrefixCache};
pub use engine::{
    Admission, Engine, EngineConfig, EngineCounters, EngineError, FinishReason, Finished, Gauges,
    KvSource, PrefillSharing, SimRequest, Ticket, Tiers,
};
pub use events::{CacheEvent, CacheReplay, Medium, ReplayError, TierEvent};
pub use greedy::{EmptyVocabulary, Sequence, Vocabulary};
pub use timing::{TimeModel, TimeModelError};
pub use transfer::{KvTransferModel, TransferModelError};

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
