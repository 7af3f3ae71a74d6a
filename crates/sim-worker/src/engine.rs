//! [`Engine`]: vLLM's scheduler over a [`PrefixCache`], with simulated time.
//!
//! A submitted request is admitted as soon as a running slot
//! (`max_num_seqs`) and its KV blocks are available, otherwise it waits in a
//! FIFO queue; like vLLM's FCFS scheduler, a waiting head that does not fit
//! blocks those behind it. At admission the whole schedule is computed from
//! the [`TimeModel`](super::TimeModel): first token at
//! `admitted_at + prefill` (with [`PrefillSharing::Serial`], the default,
//! the prefill starts only when those admitted before it are done: one
//! GPU's compute is shared, as vLLM's token budget per step shares it),
//! completion at `first_token_at + decode`. The engine registers the prompt's blocks in
//! the cache when the prefill completes and frees them when the request
//! completes, then admits waiting requests *at that simulated instant*, so
//! the results depend only on the submission times, never on how often the
//! caller advances the clock.
//!
//! Blocks are reserved at admission for the whole sequence (the KV of
//! `prompt + output − 1` tokens; the last sampled token is never fed back),
//! so a running request never needs more blocks and is never preempted.
//! Only full prompt blocks have hashes; partial and output blocks are
//! anonymous and never cached.
//!
//! Time is a [`Duration`] since the caller's epoch; a `now` earlier than
//! the engine's clock is treated as the clock (time never goes back).
//!
//! # Driving it from an async server
//!
//! Keep the engine behind a mutex, `now = start.elapsed()`:
//!
//! * a handler calls [`submit`](Engine::submit). On
//!   [`Ticket::Admitted`] it has its [`Admission`]; on [`Ticket::Queued`] it
//!   waits for a driver task to hand it the admission (e.g. via a oneshot
//!   channel keyed by [`RequestId`]);
//! * it then sleeps until `first_token_at`, streams output token `i` at
//!   [`Admission::token_at`]`(i)`, and ends at `done_at`. The engine
//!   completes the request by itself at `done_at`; no call is needed;
//! * if the client goes away early, the handler calls
//!   [`abort`](Engine::abort) (an [`EngineError::UnknownRequest`] then just
//!   means it had already completed);
//! * a driver task loops: lock, [`advance`](Engine::advance)`(now)`, hand
//!   out [`take_admitted`](Engine::take_admitted), publish
//!   [`drain_cache_events`](Engine::drain_cache_events), record
//!   [`take_finished`](Engine::take_finished), read
//!   [`next_event_time`](Engine::next_event_time), unlock; then sleep until
//!   that time or until a handler notifies it after a submit or abort.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use super::cache::PrefixCache;
use super::events::{CacheEvent, TierEvent};
use super::transfer::KvTransferModel;
use super::{InvariantViolation, RequestId};

mod admit;
mod types;

pub use types::{
    Admission, EngineConfig, EngineCounters, EngineError, FinishReason, Finished, Gauges, KvSource,
    PrefillSharing, SimRequest, Ticket, Tiers,
};

/// Which moment of a running request a timeline entry marks. Prefill
/// completions sort before completions at the same instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    PrefillDone,
    Done,
}

/// A timeline entry; `seq` tells a live entry from one of an aborted
/// request (lazy deletion) and orders ties by admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Timed {
    at: Duration,
    phase: Phase,
    seq: u64,
    id: RequestId,
}

#[derive(Debug, Clone)]
struct Waiting {
    req: SimRequest,
    source: KvSource,
    submitted_at: Duration,
}

#[derive(Debug, Clone)]
struct Running {
    admission: Admission,
    seq: u64,
}

/// A simulated vLLM engine: scheduler, prefix cache and clock. See the
/// [module docs](self) for the model and how to drive it.
#[derive(Debug, Clone)]
pub struct Engine {
    config: EngineConfig,
    cache: PrefixCache,
    clock: Duration,
    waiting: VecDeque<Waiting>,
    waiting_ids: HashSet<RequestId>,
    running: HashMap<RequestId, Running>,
    timeline: BinaryHeap<Reverse<Timed>>,
    next_seq: u64,
    admitted: Vec<Admission>,
    finished: Vec<Finished>,
    counters: EngineCounters,
    /// With serial prefills, when the last admitted prefill completes.
    prefill_busy_until: Duration,
    transfer: KvTransferModel,
}

impl Engine {
    /// An idle engine at time zero with an empty cache.
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        config.time.validate()?;
        if config.max_num_seqs == 0 {
            return Err(EngineError::InvalidConfig(
                "max_num_seqs must be at least 1",
            ));
        }
        let mut cache = PrefixCache::new(config.num_blocks, config.block_size)?;
        cache.set_family_blocks(config.family_blocks);
        Ok(Engine {
            cache,
            config,
            clock: Duration::ZERO,
            waiting: VecDeque::new(),
            waiting_ids: HashSet::new(),
            running: HashMap::new(),
            timeline: BinaryHeap::new(),
            next_seq: 0,
            admitted: Vec::new(),
            finished: Vec::new(),
            counters: EngineCounters::default(),
            prefill_busy_until: Duration::ZERO,
            transfer: KvTransferModel::default(),
        })
    }

    /// Gives the engine a CPU tier and its transfer model (see [`Tiers`]).
    /// Call before the first submit: the CPU tier starts empty.
    pub fn set_tiers(&mut self, tiers: Tiers) -> Result<(), EngineError> {
        tiers.transfer.validate()?;
        self.transfer = tiers.transfer;
        self.cache.set_cpu_blocks(tiers.cpu_blocks);
        Ok(())
    }

    /// Audits the cache's event stream (see [`PrefixCache::with_audit`]).
    pub fn with_audit(mut self) -> Self {
        self.cache = self.cache.with_audit();
        self
    }

    /// Whether cache events are queued for
    /// [`drain_cache_events`](Self::drain_cache_events) (on by default).
    pub fn set_record_events(&mut self, on: bool) {
        self.cache.set_record_events(on);
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The engine's clock: the latest `now` it was given.
    pub fn now(&self) -> Duration {
        self.clock
    }

    /// The prefix cache, for lookups, snapshots and stats.
    pub fn cache(&self) -> &PrefixCache {
        &self.cache
    }

    /// Submits `req` at `now`: admitted at once if nothing is waiting and a
    /// slot and blocks are free, otherwise queued. Invalid requests are
    /// refused without side effects.
    pub fn submit(&mut self, req: SimRequest, now: Duration) -> Result<Ticket, EngineError> {
        self.submit_from(req, KvSource::Local, now)
    }

    /// [`submit`](Self::submit) for a request whose prompt KV comes from
    /// `source`.
    pub fn submit_from(
        &mut self,
        req: SimRequest,
        source: KvSource,
        now: Duration,
    ) -> Result<Ticket, EngineError> {
        self.advance(now);
        let now = self.clock;
        self.validate(&req)?;
        if self.waiting.is_empty()
            && let Some(admission) = self.try_admit(&req, source, now, now)?
        {
            self.counters.submitted += 1;
            // With a zero-cost model it may already be due.
            self.advance(now);
            return Ok(Ticket::Admitted(admission));
        }
        self.counters.submitted += 1;
        self.waiting_ids.insert(req.id);
        self.waiting.push_back(Waiting {
            req,
            source,
            submitted_at: now,
        });
        Ok(Ticket::Queued {
            position: self.waiting.len() - 1,
        })
    }

    /// Moves the clock to `now`, processing in time order every prefill
    /// completion (blocks become cached), request completion (blocks freed)
    /// and the admissions they allow.
    pub fn advance(&mut self, now: Duration) {
        let now = now.max(self.clock);
        while let Some(Reverse(next)) = self.timeline.peek()
            && next.at <= now
        {
            let Some(Reverse(event)) = self.timeline.pop() else {
                break;
            };
            self.clock = self.clock.max(event.at);
            if !self.is_live(&event) {
                continue;
            }
            match event.phase {
                Phase::PrefillDone => {
                    // Cannot fail: a live request holds its blocks.
                    let _ = self.cache.commit(event.id);
                }
                Phase::Done => {
                    self.finish(event.id, event.at, FinishReason::Completed);
                    self.admit_waiting(event.at);
                }
            }
        }
        self.clock = now;
        self.drop_stale();
    }

    /// When the next prefill or request completes, if anything runs: the
    /// time at which the driver should call [`advance`](Self::advance).
    pub fn next_event_time(&self) -> Option<Duration> {
        self.timeline.peek().map(|Reverse(t)| t.at)
    }

    /// Ends request `id` early at `now` (the client went away): a waiting
    /// request leaves the queue, a running one frees its blocks (uncached
    /// if its prefill had not completed). Also reported by
    /// [`take_finished`](Self::take_finished).
    pub fn abort(&mut self, id: RequestId, now: Duration) -> Result<Finished, EngineError> {
        self.advance(now);
        let now = self.clock;
        let finished = if let Some(f) = self.finish(id, now, FinishReason::Aborted) {
            f
        } else if self.waiting_ids.remove(&id) {
            let pos = self.waiting.iter().position(|w| w.req.id == id);
            let submitted_at = pos
                .and_then(|p| self.waiting.remove(p))
                .map_or(now, |w| w.submitted_at);
            self.report(Finished {
                id,
                reason: FinishReason::Aborted,
                submitted_at,
                finished_at: now,
                admission: None,
            })
        } else {
            return Err(EngineError::UnknownRequest(id));
        };
        self.admit_waiting(now);
        // Processes what the admissions made due (zero-cost models) and
        // drops the aborted request's timeline entries from the top.
        self.advance(now);
        Ok(finished)
    }

    /// The schedule of running request `id`.
    pub fn admission(&self, id: RequestId) -> Option<&Admission> {
        self.running.get(&id).map(|r| &r.admission)
    }

    /// Whether request `id` is in the waiting queue.
    pub fn is_waiting(&self, id: RequestId) -> bool {
        self.waiting_ids.contains(&id)
    }

    /// Takes the admissions of requests that had been queued, in admission
    /// order (those admitted directly by `submit` were returned there).
    pub fn take_admitted(&mut self) -> Vec<Admission> {
        std::mem::take(&mut self.admitted)
    }

    /// Takes the requests that completed or were aborted, in order.
    pub fn take_finished(&mut self) -> Vec<Finished> {
        std::mem::take(&mut self.finished)
    }

    /// Takes the queued cache events, oldest first, without their tier.
    pub fn drain_cache_events(&mut self) -> Vec<CacheEvent> {
        self.cache.drain_events()
    }

    /// Takes the queued cache events, oldest first, with their tier, for
    /// publishing.
    pub fn drain_tier_events(&mut self) -> Vec<TierEvent> {
        self.cache.drain_tier_events()
    }

    /// vLLM's `/reset_prefix_cache` at `now` (see [`PrefixCache::reset`]).
    pub fn reset_prefix_cache(&mut self, now: Duration) {
        self.advance(now);
        self.cache.reset();
    }

    /// The load gauges vLLM exports.
    pub fn gauges(&self) -> Gauges {
        Gauges {
            num_requests_running: self.running.len(),
            num_requests_waiting: self.waiting.len(),
            kv_cache_usage_perc: self.cache.stats().usage,
        }
    }

    /// Totals since creation.
    pub fn counters(&self) -> EngineCounters {
        self.counters
    }

    /// Checks the cache's invariants and the scheduler's: running within
    /// `max_num_seqs`, running requests hold blocks and waiting ones do not,
    /// nobody waits while nothing runs, schedules are ordered and the clock
    /// has not passed a running request's completion.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |msg: String| Err(InvariantViolation(format!("engine: {msg}")));
        self.cache.check_invariants()?;
        if self.running.len() > self.config.max_num_seqs {
            return fail(format!("{} running", self.running.len()));
        }
        if !self.waiting.is_empty() && self.running.is_empty() {
            return fail("requests wait while nothing runs".into());
        }
        let queued: HashSet<RequestId> = self.waiting.iter().map(|w| w.req.id).collect();
        if queued != self.waiting_ids || queued.len() != self.waiting.len() {
            return fail("waiting queue and id set disagree".into());
        }
        for w in &self.waiting {
            if self.cache.holds(w.req.id) || self.running.contains_key(&w.req.id) {
                return fail(format!("waiting {} holds blocks or runs", w.req.id));
            }
        }
        for (id, r) in &self.running {
            let a = &r.admission;
            let ordered = a.submitted_at <= a.admitted_at
                && a.admitted_at <= a.first_token_at
                && a.first_token_at <= a.done_at;
            if !self.cache.holds(*id) || !ordered || a.done_at <= self.clock {
                return fail(format!("running {id} is inconsistent: {a:?}"));
            }
        }
        Ok(())
    }

    fn is_live(&self, t: &Timed) -> bool {
        self.running.get(&t.id).is_some_and(|r| r.seq == t.seq)
    }

    /// Pops entries of aborted requests off the top of the timeline, so
    /// that [`next_event_time`](Self::next_event_time) names a live event.
    fn drop_stale(&mut self) {
        while let Some(Reverse(top)) = self.timeline.peek()
            && !self.is_live(top)
        {
            self.timeline.pop();
        }
    }
}
