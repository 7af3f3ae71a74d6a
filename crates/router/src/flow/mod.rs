//! Flow control: while every worker of a model is saturated, requests wait
//! in the routers instead of in the engines, and are routed when they are
//! dispatched, with the fleet's state of that moment (late binding).
//!
//! The order is the fleet's, kept in Valkey (`flow_dispatch.lua`): the
//! highest priority first, tenants sharing a priority by weight; a router
//! dispatches its own waiting requests only as far as the free capacity
//! reaches in that order, so low-priority work waiting on one router does
//! not go ahead of high-priority work waiting on another.
//!
//! * `settings`: [`FlowSettings`], the thresholds and the bounds.
//! * `saturation`: the local view of a model's saturation, kept from the
//!   routing calls' replies, so that the unsaturated path costs one read
//!   (whether anything waits fleet-wide) and no script.
//! * `room`: a model's waiting room in this router: its waiters,
//!   shedding, and (`room::dispatch`) the dispatcher that polls the
//!   fleet's order while any wait.
//! * `refusal`: [`Refusal`], why a request was not served, as a response.
//! * `record`: the flow metrics of one request, by band and tenant.

mod record;
mod refusal;
mod room;
mod saturation;

pub use crate::config::FlowSettings;
pub use refusal::{Refusal, ShedReason};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::admission::RequestClass;
use crate::routing::Candidate;
use room::Room;
use state::StateStore;

/// Flow control of one router: every model's waiting room.
pub struct FlowControl {
    store: StateStore,
    settings: FlowSettings,
    rooms: Mutex<HashMap<String, Arc<Room>>>,
    seq: AtomicU64,
}

/// Leave to route a request: hold it until the routing call has counted
/// the request in flight, then drop it (a dispatched one's place in the
/// free capacity is handed back to its in-flight count).
pub struct Ticket {
    release: Option<Release>,
}

/// What a ticket gives back when its request was counted in flight.
enum Release {
    /// Its place among the requests let go straight to routing.
    Direct(Arc<Room>),
    /// Its place in the fleet's free capacity (a dispatched member).
    Dispatched(Arc<Room>, String),
}

impl Drop for Ticket {
    fn drop(&mut self) {
        match self.release.take() {
            Some(Release::Direct(room)) => room.direct_done(),
            Some(Release::Dispatched(room, member)) => room.routed(member),
            None => {}
        }
    }
}

impl FlowControl {
    /// Flow control over `store` with `settings`.
    pub fn new(store: StateStore, settings: FlowSettings) -> Arc<Self> {
        Arc::new(FlowControl {
            store,
            settings,
            rooms: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
        })
    }

    fn room(&self, model: &str) -> Arc<Room> {
        let mut rooms = self.rooms.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = rooms.get(model) {
            return r.clone();
        }
        // Only models that have live workers get here (the caller routed
        // them, or the fleet's room answered), but a client may name many:
        // rooms without waiters are dropped before the map grows past 4096.
        if rooms.len() >= 4096 {
            rooms.retain(|_, r| !r.idle());
        }
        let r = Arc::new(Room::new(model, self.store.clone(), self.settings.clone()));
        rooms.insert(model.to_owned(), r.clone());
        r
    }

    /// Leave to route a request of `model` and `class` now, after waiting
    /// for it if the workers are saturated; or why not.
    pub async fn admit(&self, model: &str, class: &RequestClass) -> Result<Ticket, Refusal> {
        let room = self.room(model);
        if room.try_direct() {
            // This router's view says the workers take more; entries may
            // still wait on other routers (or hold places dispatched to
            // them), and a request must not go past them: one read says.
            // Unanswered (a timeout of the routing lane on a busy
            // machine): the fleet's room is asked as when busy, which tells
            // a slow reply from an outage (the 10:1 run let 60 requests
            // past its waiting entries when this counted as "not busy").
            let busy = self.store.flow_busy(model).await.unwrap_or_else(|e| {
                tracing::debug!(error = %e, model, "flow busy unanswered; asking the fleet's room");
                true
            });
            if !busy {
                record::Labels::of(class).admitted("direct", std::time::Duration::ZERO);
                return Ok(Ticket {
                    release: Some(Release::Direct(room)),
                });
            }
            room.direct_done();
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        room.wait(seq, class).await
    }

    /// A routing call's view of `model`'s workers: whether they are
    /// saturated now (the next request may go straight to routing, or
    /// must ask the fleet's waiting room).
    pub fn observe<'a>(&self, model: &str, candidates: impl Iterator<Item = &'a Candidate>) {
        let room = self.room(model);
        let (saturated, free) = saturation::view(&self.settings.thresholds, candidates);
        room.observe(saturated, free);
    }

    /// What explain shows: the thresholds, whether `candidates` are
    /// saturated, each one's state, and this router's waiters.
    pub fn explain<'a>(
        &self,
        model: &str,
        candidates: impl Iterator<Item = &'a Candidate> + Clone,
    ) -> serde_json::Value {
        let t = &self.settings.thresholds;
        let (saturated, _) = saturation::view(t, candidates.clone());
        let workers: Vec<serde_json::Value> = candidates
            .map(|c| {
                serde_json::json!({
                    "worker_id": c.worker_id,
                    "past": saturation::past(t, c),
                })
            })
            .collect();
        let room = self.rooms.lock().ok().and_then(|r| r.get(model).cloned());
        serde_json::json!({
            "enabled": true,
            "thresholds": {
                "max_in_flight_per_worker": (t.max_in_flight > 0).then_some(t.max_in_flight),
                "waiting": t.waiting,
                "kv_usage": t.kv_usage,
                "prefill_tokens": t.prefill_tokens,
            },
            "saturated": saturated,
            "workers": workers,
            "waiting_here": room.as_ref().map_or(0, |r| r.len()),
            "decision": if !saturated {
                "route now: a worker is below every threshold"
            } else {
                "wait: every worker is past a threshold; priority >= 0 waits in the router (highest priority first, tenants by weight), a negative priority is refused with 429"
            },
        })
    }
}

/// A priority as a metric label (priorities come from the configured
/// objectives, so their number is bounded).
pub(crate) fn band(priority: i32) -> String {
    priority.to_string()
}

/// Unix milliseconds of `at` (an `Instant` in the future or now).
pub(crate) fn unix_ms_at(at: Instant) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ahead = at.saturating_duration_since(Instant::now());
    u64::try_from((now + ahead).as_millis()).unwrap_or(u64::MAX)
}
