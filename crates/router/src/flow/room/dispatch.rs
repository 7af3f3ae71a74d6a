//! The dispatcher of a [`Room`]: while requests wait here it asks the
//! fleet's room (`flow_dispatch.lua`) every [`POLL`] which of them the
//! free capacity reaches, keeps what each reply says, and hands the
//! dispatched requests on; with the fleet's room unanswered past
//! [`GIVE_UP`], the waiting requests are routed without it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{GIVE_UP, POLL, ROUTE_WITHIN, Room, Verdict};
use state::FlowDispatch;

impl Room {
    /// Keeps what a reply of the fleet's room said (saturation, free
    /// capacity, requests waiting fleet-wide).
    pub(super) fn seen(&self, d: &FlowDispatch) {
        {
            let mut st = self.lock();
            st.seen = Some((Instant::now(), d.saturated || d.waiting > 0));
            st.free = d.free;
        }
        metrics::gauge!("prefix_router_flow_saturated", "model" => self.model.clone())
            .set(f64::from(u8::from(d.saturated)));
        metrics::gauge!("prefix_router_flow_fleet_waiting", "model" => self.model.clone())
            .set(d.waiting as f64);
    }

    /// Hands on the members dispatched to this router that still wait
    /// here: those a call dispatched, and those held (dispatched by an
    /// earlier call, not yet routed) whose call's reply was lost (a timeout
    /// of the routing lane while Valkey still ran it). A member no longer
    /// here was handed on already (by another reply: an arrival's call may
    /// report a dispatch before the dispatching call's reply comes), or
    /// left: its guard, or the shedder, took it out of the fleet's room,
    /// its place included. Its place must not be given back here: that
    /// would let one more request past the thresholds while it is routed.
    pub(super) fn hand_on<'a>(&self, members: impl IntoIterator<Item = &'a String>) {
        for m in members {
            let w = self.lock().remove(&self.model, m);
            if let Some(w) = w {
                // A dropped receiver was dropped with its guard, which
                // takes the member out.
                let _ = w.tx.send(Verdict::Dispatched);
            }
        }
    }

    /// Whether the fleet's room answered within `d` (the last reply).
    pub(super) fn answered_within(&self, d: Duration) -> bool {
        self.lock().seen.is_some_and(|(at, _)| at.elapsed() < d)
    }

    /// Starts the dispatcher unless it runs: it asks the fleet's room every
    /// [`POLL`] while anything waits here.
    pub(super) fn dispatch_in_background(self: &Arc<Self>) {
        {
            let mut st = self.lock();
            if st.dispatching {
                return;
            }
            st.dispatching = true;
        }
        let room = self.clone();
        tokio::spawn(async move {
            loop {
                {
                    let mut st = room.lock();
                    if st.waiters.is_empty() {
                        st.dispatching = false;
                        return;
                    }
                }
                let t = &room.settings.thresholds;
                match room
                    .store
                    .flow_dispatch(&room.model, t, ROUTE_WITHIN, None)
                    .await
                {
                    Ok(d) => {
                        room.seen(&d);
                        room.hand_on(d.dispatched.iter().chain(&d.held));
                    }
                    Err(e) if e.is_unavailable() && room.answered_within(GIVE_UP) => {
                        // One slow or lost reply (a timeout of the routing
                        // lane): the fleet's order still holds; ask again.
                        tracing::debug!(error = %e, model = %room.model, "flow dispatch unanswered; polling again");
                    }
                    Err(e) if e.is_unavailable() => {
                        tracing::warn!(error = %e, model = %room.model, "flow control unavailable; routing the waiting requests without it");
                        let all: Vec<String> = room.lock().waiters.keys().cloned().collect();
                        room.hand_on(&all);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, model = %room.model, "flow dispatch failed")
                    }
                }
                tokio::time::sleep(POLL).await;
            }
        });
    }
}
