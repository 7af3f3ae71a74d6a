//! What every part of a sharded model must see of a request, batched: the
//! in-flight changes of the parts that did not route it, and the load a
//! worker reported. Also, in any model, the end of requests and of their
//! prefills (their count and tokens taken off when the answer ends and at
//! its first byte). One call per request and part would cost each primary
//! about 0.2 ms per request of the whole fleet (docs/capacity.md); here
//! each part gets one `change_in_flight.lua` and one `report_load.lua` call per
//! [`FLUSH_EVERY`], carrying every worker's net change. A worker's change
//! sent at once in an unsharded model (a request's end) takes that
//! worker's queued changes with it (`take_queued_in_flight`).
//!
//! The part that routed a request counts it atomically in its routing call,
//! so the herd of routers racing for one new prefix still serialises
//! there; the other parts see it at most one flush later. A flush that
//! fails is dropped: the router lease renewals reconcile the gauges with
//! this router's ledger (`in_flight`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use protocol::MAX_REPORTED_REQUESTS;

use super::{InFlight, Inner, Lane, ScriptName, StateStore};

/// How often the batched changes go out.
pub const FLUSH_EVERY: Duration = Duration::from_millis(10);

/// A worker's latest load; `None` leaves a field as it was.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct LoadReport {
    pub(crate) waiting: Option<u64>,
    pub(crate) running: Option<u64>,
    pub(crate) kv: Option<f64>,
}

impl LoadReport {
    /// `newer` over `self`, field by field.
    fn merge(self, newer: LoadReport) -> LoadReport {
        LoadReport {
            waiting: newer.waiting.or(self.waiting),
            running: newer.running.or(self.running),
            kv: newer.kv.or(self.kv),
        }
    }
}

/// One worker's queued in-flight changes in one part: their net sum (what
/// the flush sends, and what the ledger takes once Valkey has it), and
/// their decreases (what the ledger takes if the flush fails: those
/// requests are over whatever Valkey does, and the next router lease
/// renewal lowers the gauges to the ledger).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Queued {
    pub(crate) net: InFlight,
    pub(crate) decreases: InFlight,
}

impl Queued {
    /// The sum of the queued changes' increases (what the ledger takes
    /// only once Valkey has them).
    pub(crate) fn increases(&self) -> InFlight {
        InFlight {
            requests: self.net.requests.saturating_sub(self.decreases.requests),
            prefill_tokens: self
                .net
                .prefill_tokens
                .saturating_sub(self.decreases.prefill_tokens),
        }
    }
}

/// Per part, per worker: the queued in-flight changes and the latest load.
#[derive(Debug, Default)]
struct Batch {
    in_flight: HashMap<String, HashMap<String, Queued>>,
    loads: HashMap<String, HashMap<String, LoadReport>>,
}

/// The pending batch and its flusher.
#[derive(Debug, Default)]
pub(crate) struct FanOut {
    batch: Mutex<Batch>,
    flushing: AtomicBool,
    /// Wakes the flusher when something is queued, or the store ends: it
    /// sleeps while nothing is (no timer ticks in an idle router).
    queued: Arc<tokio::sync::Notify>,
    /// Wakes a flusher waiting out [`FLUSH_EVERY`] when a change sent at
    /// once took the last queued one (`take_queued_in_flight`): it goes
    /// back to sleep then, rather than wake a thread for an empty batch
    /// when its timer ends (with short answers, once per request).
    emptied: Arc<tokio::sync::Notify>,
    /// Held by a flush while it sends and updates the ledger, and by a
    /// router lease renewal while it reads the ledger and reconciles: a
    /// renewal never sees a batch in Valkey and not in the ledger, or the
    /// reverse. (Queued changes are in neither.)
    pub(crate) gate: tokio::sync::Mutex<()>,
}

impl FanOut {
    fn batch(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> Batch {
        std::mem::take(&mut *self.batch())
    }

    fn is_empty(&self) -> bool {
        let b = self.batch();
        b.in_flight.is_empty() && b.loads.is_empty()
    }
}

impl Drop for FanOut {
    /// Wakes the flusher, which then finds its store gone and ends.
    fn drop(&mut self) {
        self.queued.notify_one();
    }
}

impl StateStore {
    /// Queues an in-flight change of `worker` in `part`.
    pub(crate) fn queue_in_flight(&self, part: &str, worker: &str, delta: InFlight) {
        {
            let mut b = self.inner.fan_out.batch();
            let n = b
                .in_flight
                .entry(part.to_owned())
                .or_default()
                .entry(worker.to_owned())
                .or_default();
            n.net = n.net.plus(delta);
            n.decreases = n.decreases.plus(delta.decrease());
        }
        self.start_flusher();
    }

    /// Takes `worker`'s queued in-flight changes in `part` out of the
    /// batch: a change about to go at once carries them (they reach
    /// Valkey sooner, in one call instead of that call and a flush).
    pub(crate) fn take_queued_in_flight(&self, part: &str, worker: &str) -> Option<Queued> {
        let (queued, emptied) = {
            let mut b = self.inner.fan_out.batch();
            let workers = b.in_flight.get_mut(part)?;
            let queued = workers.remove(worker);
            if workers.is_empty() {
                b.in_flight.remove(part);
            }
            (queued, b.in_flight.is_empty() && b.loads.is_empty())
        };
        if queued.is_some() && emptied {
            self.inner.fan_out.emptied.notify_waiters();
        }
        queued
    }

    /// Queues a load report of `worker` in `part`.
    pub(crate) fn queue_load(&self, part: &str, worker: &str, load: LoadReport) {
        {
            let mut b = self.inner.fan_out.batch();
            let slot = b
                .loads
                .entry(part.to_owned())
                .or_default()
                .entry(worker.to_owned())
                .or_default();
            *slot = slot.merge(load);
        }
        self.start_flusher();
    }

    /// Wakes the flusher, started once: it sends the batch
    /// [`FLUSH_EVERY`] after something was queued, and sleeps while
    /// nothing is; it ends when the store is dropped.
    fn start_flusher(&self) {
        let fan_out = &self.inner.fan_out;
        fan_out.queued.notify_one();
        if fan_out.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let queued = fan_out.queued.clone();
        let emptied = fan_out.emptied.clone();
        tokio::spawn(async move {
            loop {
                // A wake-up left by a change queued during the last flush
                // is taken at once; the store's end wakes it too (`Drop`).
                queued.notified().await;
                // Made before the check: an emptying after it is seen.
                let emptied = emptied.notified();
                match weak.upgrade() {
                    None => return,
                    Some(inner) if inner.fan_out.is_empty() => continue,
                    Some(_) => {}
                }
                tokio::select! {
                    _ = tokio::time::sleep(FLUSH_EVERY) => {}
                    // Nothing left to send; a change queued since has left
                    // its wake-up in `queued`.
                    _ = emptied => continue,
                }
                let Some(inner) = weak.upgrade() else { return };
                let store = StateStore { inner };
                store.flush_fan_out().await;
            }
        });
    }

    /// Sends the pending batch: per part, one call for the in-flight
    /// changes and one for the loads.
    pub(crate) async fn flush_fan_out(&self) {
        let _gate = self.inner.fan_out.gate.lock().await;
        let batch = self.inner.fan_out.take();
        let router = self.router_id().to_owned();
        for (part, workers) in batch.in_flight {
            let changes: Vec<(String, Queued)> = workers
                .into_iter()
                .filter(|(_, q)| !q.net.is_zero())
                .collect();
            if changes.is_empty() {
                continue;
            }
            let mut args = vec![router.clone()];
            for (w, q) in &changes {
                args.extend([
                    w.clone(),
                    q.net.requests.to_string(),
                    q.net.prefill_tokens.to_string(),
                ]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            match self
                .run::<u64>(Lane::Bulk, ScriptName::ChangeInFlight, &part, &args)
                .await
            {
                Ok(_) => {
                    for (w, q) in &changes {
                        self.inner.ledger.add(&part, w, q.net);
                    }
                }
                Err(e) => {
                    for (w, q) in &changes {
                        self.inner.ledger.add(&part, w, q.decreases);
                    }
                    tracing::debug!(error = %e, part, "batched in-flight changes lost");
                }
            }
        }
        for (part, workers) in batch.loads {
            let mut args = Vec::with_capacity(workers.len() * 4);
            for (w, l) in workers {
                let bounded = |n: u64| n.min(MAX_REPORTED_REQUESTS).to_string();
                args.extend([
                    w,
                    l.waiting.map(bounded).unwrap_or_default(),
                    l.kv.map(|k| k.clamp(0.0, 1.0).to_string())
                        .unwrap_or_default(),
                    l.running.map(bounded).unwrap_or_default(),
                ]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Err(e) = self
                .run::<u8>(Lane::Bulk, ScriptName::ReportLoad, &part, &args)
                .await
            {
                tracing::debug!(error = %e, part, "batched load reports lost");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_load_keeps_the_fields_it_does_not_give() {
        let a = LoadReport {
            waiting: Some(3),
            running: Some(2),
            kv: None,
        };
        let b = LoadReport {
            waiting: None,
            running: Some(5),
            kv: Some(0.5),
        };
        assert_eq!(
            a.merge(b),
            LoadReport {
                waiting: Some(3),
                running: Some(5),
                kv: Some(0.5)
            }
        );
    }
}
