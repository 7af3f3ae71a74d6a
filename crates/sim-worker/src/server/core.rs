//! [`SimCore`]: the simulated engine behind a mutex, its clock, and the
//! fan-out of its cache events to the reporters.
//!
//! The engine's clock is the wall time since the server started (the time
//! model's `time_scale` already shrinks or stretches every duration), so a
//! handler sleeps until `epoch + admission.token_at(i)` to emit token `i`.
//!
//! Cache events are handed to the reporters *while the engine lock is
//! held*, which gives the [`BlockSource`] contract: a snapshot (also taken
//! under the lock) reflects every report made before it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot, watch};

use super::book::TokenBook;
use super::config::StreamFault;
use super::lmcache_link::LmcacheLink;
use super::lmcache_view::ChunkView;
use super::reporting::Reporters;
use crate::{Admission, Engine, FinishReason, RequestId};
use protocol::family::FamilyBlock;
use protocol::{Tier, WorkerLoad};
use worker::push::{BlockSource, PusherHandle};

/// Totals the engine does not keep.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeStats {
    /// Output tokens produced (completed requests, and aborted ones up to
    /// their abort).
    pub generation_tokens: u64,
    /// Requests that completed.
    pub completed: u64,
    /// Requests aborted (client gone) or refused while waiting.
    pub aborted: u64,
    /// Prefills answered with handoff params for a remote decode.
    pub handoffs: u64,
}

/// Everything behind the engine lock.
pub struct EngineState {
    /// The simulated engine.
    pub engine: Engine,
    /// Queued requests' handlers, waiting for their admission.
    pub(super) waiters: HashMap<RequestId, oneshot::Sender<Admission>>,
    /// Tokens of live requests' blocks, for KV events.
    pub(super) book: TokenBook,
    /// Where cache events go.
    pub(super) reporters: Reporters,
    /// LMCache beside the engine: its chunks and its controller link.
    pub(super) lmcache: Option<(ChunkView, LmcacheLink)>,
    /// Totals for `/metrics`.
    pub stats: ServeStats,
}

impl EngineState {
    /// Moves the engine to `now`: hands admissions to their handlers,
    /// publishes cache events, then releases finished requests (in that
    /// order, so that a stored block's tokens are still known). Returns
    /// when the engine next needs a step.
    pub fn step(&mut self, now: Duration) -> Option<Duration> {
        self.engine.advance(now);
        for admission in self.engine.take_admitted() {
            if let Some(tx) = self.waiters.remove(&admission.id) {
                // A handler that went away aborts its request itself.
                let _ = tx.send(admission);
            }
        }
        self.publish();
        for f in self.engine.take_finished() {
            self.waiters.remove(&f.id);
            self.book.release(f.id);
            match (f.reason, f.admission) {
                (FinishReason::Completed, Some(a)) => {
                    self.stats.completed += 1;
                    self.stats.generation_tokens += a.output_tokens as u64;
                }
                (_, admission) => {
                    self.stats.aborted += 1;
                    if let Some(a) = admission {
                        let emitted = (0..a.output_tokens)
                            .take_while(|&i| a.token_at(i) <= f.finished_at)
                            .count();
                        self.stats.generation_tokens += emitted as u64;
                    }
                }
            }
        }
        self.engine.next_event_time()
    }

    /// Hands the engine's queued cache events to the reporters.
    pub fn publish(&mut self) {
        let events = self.engine.drain_tier_events();
        if events.is_empty() {
            return;
        }
        self.reporters.publish(&events, &self.book);
        if let Some((view, link)) = &mut self.lmcache {
            let cache = self.engine.cache();
            let cached = |h| cache.contains(h) || cache.cpu_contains(h);
            link.send(view.update(&events, &self.book, &cached));
        }
    }
}

/// The shared core of a simulated worker; see the module docs.
pub struct SimCore {
    epoch: Instant,
    state: Arc<Mutex<EngineState>>,
    wake: Notify,
    next_id: AtomicU64,
    paused: watch::Sender<bool>,
    stream_fault: watch::Sender<Option<StreamFault>>,
    pusher: Option<PusherHandle>,
}

impl SimCore {
    /// A core over `state`, whose clock starts at `epoch`.
    pub fn new(
        epoch: Instant,
        state: Arc<Mutex<EngineState>>,
        paused: bool,
        pusher: Option<PusherHandle>,
    ) -> Self {
        SimCore {
            epoch,
            state,
            wake: Notify::new(),
            next_id: AtomicU64::new(1),
            paused: watch::Sender::new(paused),
            stream_fault: watch::Sender::new(None),
            pusher,
        }
    }

    /// The engine's time now.
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// The wall-clock instant of engine time `at`.
    pub fn instant(&self, at: Duration) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.epoch + at)
    }

    /// The engine state; a poisoned lock is still used (the engine's
    /// methods keep it consistent between calls).
    pub fn lock(&self) -> MutexGuard<'_, EngineState> {
        lock(&self.state)
    }

    /// Locks the engine state after stepping the engine to now, so that an
    /// observer (gauges, `/metrics`) never sees a request the schedule has
    /// already finished but the driver task has not stepped past yet.
    pub fn lock_now(&self) -> MutexGuard<'_, EngineState> {
        let mut st = lock(&self.state);
        st.step(self.now());
        st
    }

    /// A fresh request id.
    pub fn next_id(&self) -> RequestId {
        RequestId(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Wakes the driver (after a submit, abort or reset).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves when the driver should look again.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Ends request `id` early (its client went away), if still live.
    pub fn abort(&self, id: RequestId) {
        let now = self.now();
        {
            let mut st = self.lock();
            st.waiters.remove(&id);
            // UnknownRequest: it had already completed.
            let _ = st.engine.abort(id, now);
        }
        self.wake();
    }

    /// The fleet pusher, when push reporting is on.
    pub fn pusher(&self) -> Option<&PusherHandle> {
        self.pusher.as_ref()
    }

    /// Whether the server is paused (answers nothing).
    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Pauses or resumes answering.
    pub fn set_paused(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// How answers break, if they do.
    pub fn stream_fault(&self) -> Option<StreamFault> {
        *self.stream_fault.borrow()
    }

    /// Sets (or clears) how answers break.
    pub fn set_stream_fault(&self, fault: Option<StreamFault>) {
        self.stream_fault.send_replace(fault);
    }

    /// Waits while the server is paused.
    pub async fn wait_unpaused(&self) {
        let mut rx = self.paused.subscribe();
        // Err: the sender is gone with the core; nothing to wait for.
        let _ = rx.wait_for(|paused| !paused).await;
    }

    /// What the pusher reads snapshots and load from.
    pub fn block_source(state: &Arc<Mutex<EngineState>>) -> Arc<dyn BlockSource> {
        Arc::new(EngineSource(Arc::clone(state)))
    }
}

fn lock(state: &Mutex<EngineState>) -> MutexGuard<'_, EngineState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The engine as a [`BlockSource`].
struct EngineSource(Arc<Mutex<EngineState>>);

impl BlockSource for EngineSource {
    fn snapshot(&self) -> Vec<FamilyBlock> {
        let st = lock(&self.0);
        let mut blocks = st.engine.cache().indexed_hashes();
        if st.reporters.hide_cpu_tier {
            blocks.retain(|b| b.tier != Tier::Cpu);
        }
        blocks
    }

    fn load(&self) -> Option<WorkerLoad> {
        let g = lock(&self.0).engine.gauges();
        Some(WorkerLoad {
            num_requests_waiting: g.num_requests_waiting as u64,
            num_requests_running: g.num_requests_running as u64,
            kv_cache_usage_perc: g.kv_cache_usage_perc.clamp(0.0, 1.0),
        })
    }
}
