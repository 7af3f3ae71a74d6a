//! [`Room`]: one model's waiting room in this router. A request that may
//! not be routed at once (the workers saturated, or others waiting ahead
//! fleet-wide) waits here with a place in the fleet's order, kept in
//! Valkey; while any waits, a dispatcher asks `flow_dispatch.lua` every
//! [`POLL`] which of them the free capacity reaches, and hands those on.
//! Shedding: past `--max-queued` the lowest priority goes first (at equal
//! priority, the entry furthest ahead in its tenant's virtual time, i.e.
//! of the tenant with the most waiting); past its wait, a request gets a
//! `queue_timeout`; a client gone while waiting leaves at once.

mod dispatch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::record::Labels;
use super::{FlowSettings, Refusal, Release, ShedReason, Ticket, band, unix_ms_at};
use crate::admission::RequestClass;
use state::{Arrival, FlowArrival, StateStore, flow_member};

/// How often the dispatcher asks while requests wait here.
pub const POLL: Duration = Duration::from_millis(10);
/// How long a dispatched request holds its place in the free capacity
/// before its routing call counts it in flight (it leaves sooner, when
/// routed); bounds what a lost leave costs.
const ROUTE_WITHIN: Duration = Duration::from_secs(2);
/// How long a reply's "not saturated, nobody waiting" lets requests go
/// straight to routing without asking.
const FRESH: Duration = Duration::from_secs(1);
/// How long the fleet's room may go unanswered before the waiting
/// requests are routed without it: a lost or slow reply is not an outage.
const GIVE_UP: Duration = Duration::from_secs(2);

enum Verdict {
    Dispatched,
    Shed(ShedReason),
}

struct Waiter {
    priority: i32,
    labels: Labels,
    /// When it came in.
    since: Instant,
    /// Its virtual start tag (infinite until the fleet's room answered).
    tag: f64,
    tx: oneshot::Sender<Verdict>,
}

#[derive(Default)]
struct RoomState {
    waiters: HashMap<String, Waiter>,
    /// Waiters per priority, for the gauge.
    per_band: HashMap<i32, usize>,
    dispatching: bool,
    /// When the last reply came, and whether requests must ask the fleet's
    /// room (saturated, or entries waiting).
    seen: Option<(Instant, bool)>,
    /// The free places the last reply saw (see `saturation::view`).
    free: u64,
    /// Requests let go straight to routing and not yet counted in flight
    /// by their routing call: at most `free` at once, so a burst after a
    /// clean reply does not all go past the room.
    direct: u64,
}

impl RoomState {
    fn insert(&mut self, model: &str, member: String, w: Waiter) {
        let p = w.priority;
        self.waiters.insert(member, w);
        self.count(model, p, 1);
    }

    fn remove(&mut self, model: &str, member: &str) -> Option<Waiter> {
        let w = self.waiters.remove(member)?;
        self.count(model, w.priority, -1);
        Some(w)
    }

    fn count(&mut self, model: &str, p: i32, delta: i64) {
        let n = self.per_band.entry(p).or_default();
        *n = usize::try_from(*n as i64 + delta).unwrap_or(0);
        metrics::gauge!("prefix_router_flow_waiting", "model" => model.to_owned(), "band" => band(p))
            .set(*n as f64);
    }
}

/// One model's waiting room in this router.
pub struct Room {
    model: String,
    store: StateStore,
    settings: FlowSettings,
    state: Mutex<RoomState>,
}

/// Takes a waiter out of the room (here and in Valkey) unless disarmed:
/// on a timeout, and when the client goes away (its request's future is
/// dropped).
struct WaitGuard<'a> {
    room: &'a Arc<Room>,
    member: &'a str,
    priority: i32,
    labels: &'a Labels,
    reason: &'static str,
    started: Instant,
    armed: bool,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.room.lock().remove(&self.room.model, self.member);
        self.labels.shed(self.reason, self.started.elapsed());
        // Waiting or dispatched meanwhile: either is taken back.
        self.room.leave(vec![
            (self.member.to_owned(), Some(self.priority)),
            (self.member.to_owned(), None),
        ]);
    }
}

impl Room {
    pub fn new(model: &str, store: StateStore, settings: FlowSettings) -> Room {
        Room {
            model: model.to_owned(),
            store,
            settings,
            state: Mutex::new(RoomState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RoomState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests waiting here.
    pub fn len(&self) -> usize {
        self.lock().waiters.len()
    }

    /// Nothing waits and no dispatcher runs.
    pub fn idle(&self) -> bool {
        let st = self.lock();
        st.waiters.is_empty() && !st.dispatching
    }

    /// Takes a place to route a request without asking the fleet's room,
    /// if it may: nothing waits here, the last reply (fresh) said the
    /// workers take more and nobody waited fleet-wide, and fewer requests
    /// went straight to routing since than the places it saw free. Entries
    /// that came to other routers since are the caller's to check
    /// (`StateStore::flow_busy`); the place goes back with
    /// [`direct_done`](Self::direct_done).
    pub fn try_direct(&self) -> bool {
        let mut st = self.lock();
        let may = st.waiters.is_empty()
            && st.direct < st.free
            && st
                .seen
                .is_some_and(|(at, ask)| !ask && at.elapsed() < FRESH);
        if may {
            st.direct += 1;
        }
        may
    }

    /// A request let go straight to routing was counted in flight (or
    /// went to the fleet's room after all).
    pub fn direct_done(&self) {
        let mut st = self.lock();
        st.direct = st.direct.saturating_sub(1);
    }

    /// A routing call's view: saturated or not, and the places free (the
    /// routed request counted). It may only tell requests to ask: whether
    /// entries wait fleet-wide is known from the fleet's room alone, so a
    /// routing view that finds a free worker must not clear what the
    /// room's last reply said (the fairness run's heavy tenant went around
    /// the room 48 times that way).
    pub fn observe(&self, saturated: bool, free: u64) {
        {
            let mut st = self.lock();
            let asked = st.seen.is_some_and(|(_, ask)| ask);
            if saturated || !asked {
                st.seen = Some((Instant::now(), saturated));
                st.free = free;
            }
        }
        metrics::gauge!("prefix_router_flow_saturated", "model" => self.model.clone())
            .set(f64::from(u8::from(saturated)));
    }

    /// Takes members out of the fleet's room, off the request path.
    fn leave(&self, members: Vec<(String, Option<i32>)>) {
        if members.is_empty() {
            return;
        }
        let (store, model) = (self.store.clone(), self.model.clone());
        tokio::spawn(async move {
            if let Err(e) = store.flow_leave(&model, &members).await {
                tracing::debug!(error = %e, "flow leave lost; the entries' deadlines bound it");
            }
        });
    }

    /// A dispatched request was routed: its place goes back.
    pub fn routed(&self, member: String) {
        self.leave(vec![(member, None)]);
    }

    /// Waits for leave to route a request of `class` (`seq`: unique in
    /// this router), or says why it may not wait.
    pub async fn wait(self: &Arc<Self>, seq: u64, class: &RequestClass) -> Result<Ticket, Refusal> {
        let p = class.priority;
        let labels = Labels::of(class);
        let started = Instant::now();
        let deadline = started + self.settings.timeout_of(p);
        let member = flow_member(self.store.router_id(), seq, unix_ms_at(deadline));
        let (tx, mut rx) = oneshot::channel();
        // In the room before the fleet's room knows it: a dispatcher's call
        // may dispatch it before this call's reply comes.
        self.lock().insert(
            &self.model,
            member.clone(),
            Waiter {
                priority: p,
                labels: labels.clone(),
                since: started,
                tag: f64::INFINITY,
                tx,
            },
        );
        let mut guard = WaitGuard {
            room: self,
            member: &member,
            priority: p,
            labels: &labels,
            reason: "client_gone",
            started,
            armed: true,
        };
        let arrival = FlowArrival {
            member: &member,
            priority: p,
            tenant: &class.tenant.id,
            weight: f64::from(class.tenant.weight.max(1)),
            may_wait: p >= 0,
        };
        let t = &self.settings.thresholds;
        let mut reply = self
            .store
            .flow_dispatch(&self.model, t, ROUTE_WITHIN, Some(&arrival))
            .await;
        // One slow or lost reply (a timeout of the routing lane) while the
        // fleet's room answers otherwise is not an outage: ask again rather
        // than let this request past the order (the same member, so an
        // arrival the lost call placed is placed once).
        while matches!(&reply, Err(e) if e.is_unavailable())
            && self.answered_within(GIVE_UP)
            && started.elapsed() < GIVE_UP
        {
            tokio::time::sleep(POLL).await;
            reply = self
                .store
                .flow_dispatch(&self.model, t, ROUTE_WITHIN, Some(&arrival))
                .await;
        }
        let d = match reply {
            Ok(d) => d,
            Err(e) => {
                // Without the shared state there is no fleet order to keep:
                // route as without flow control (routing falls back too).
                tracing::warn!(error = %e, model = %self.model, "flow control unavailable; routing without it");
                guard.armed = false;
                self.lock().remove(&self.model, &member);
                return Ok(self.ticket(None, "unavailable", &labels, started));
            }
        };
        self.seen(&d);
        self.hand_on(d.dispatched.iter().chain(&d.held));
        let queued = match d.arrival {
            Arrival::Dispatched => {
                guard.armed = false;
                self.lock().remove(&self.model, &member);
                return Ok(self.ticket(Some(member.clone()), "granted", &labels, started));
            }
            Arrival::Queued(tag) => tag,
            Arrival::Refused | Arrival::None => {
                guard.reason = if p < 0 {
                    ShedReason::Sheddable.code()
                } else {
                    ShedReason::QueueFull.code()
                };
                drop(guard);
                let reason = if p < 0 {
                    ShedReason::Sheddable
                } else {
                    ShedReason::QueueFull
                };
                return Err(Refusal::new(reason, 1));
            }
        };
        labels.queued();
        if self
            .place(&member, queued)
            .is_some_and(|victim| victim == member)
        {
            guard.reason = ShedReason::QueueFull.code();
            drop(guard);
            return Err(Refusal::new(ShedReason::QueueFull, 1));
        }
        self.dispatch_in_background();
        tokio::select! {
            v = &mut rx => match v {
                Ok(Verdict::Dispatched) => {
                    guard.armed = false;
                    Ok(self.ticket(Some(member.clone()), "dispatched", &labels, started))
                }
                Ok(Verdict::Shed(reason)) => {
                    // The shedder took it out and counted it.
                    guard.armed = false;
                    Err(Refusal::new(reason, 1))
                }
                Err(_) => {
                    guard.reason = ShedReason::QueueTimeout.code();
                    drop(guard);
                    Err(Refusal::new(ShedReason::QueueTimeout, 1))
                }
            },
            _ = tokio::time::sleep_until(deadline.into()) => {
                guard.reason = ShedReason::QueueTimeout.code();
                drop(guard);
                Err(Refusal::new(ShedReason::QueueTimeout, 1))
            }
        }
    }

    fn ticket(
        self: &Arc<Self>,
        member: Option<String>,
        path: &'static str,
        labels: &Labels,
        started: Instant,
    ) -> Ticket {
        labels.admitted(path, started.elapsed());
        Ticket {
            release: member.map(|m| Release::Dispatched(self.clone(), m)),
        }
    }

    /// Gives `member` its tag and keeps the room within `--max-queued`:
    /// returns the member shed to make room, if any (perhaps `member`).
    fn place(&self, member: &str, tag: f64) -> Option<String> {
        let mut st = self.lock();
        if let Some(w) = st.waiters.get_mut(member) {
            w.tag = tag;
        }
        if st.waiters.len() <= self.settings.max_queued {
            return None;
        }
        // The lowest priority; at equal priority, the latest virtual start.
        let victim = st
            .waiters
            .iter()
            .min_by(|(_, a), (_, b)| a.priority.cmp(&b.priority).then(b.tag.total_cmp(&a.tag)))
            .map(|(m, _)| m.clone())?;
        if victim == member {
            return Some(victim);
        }
        let w = st.remove(&self.model, &victim)?;
        drop(st);
        // Its guard is disarmed by the verdict: the shedder records it.
        w.labels
            .shed(ShedReason::QueueFull.code(), w.since.elapsed());
        let _ = w.tx.send(Verdict::Shed(ShedReason::QueueFull));
        // Waiting or dispatched meanwhile: either is taken back.
        self.leave(vec![
            (victim.clone(), Some(w.priority)),
            (victim.clone(), None),
        ]);
        Some(victim)
    }
}
