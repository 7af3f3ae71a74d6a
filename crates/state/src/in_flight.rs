//! This router's own ledger of its requests in flight, per model and
//! worker, and the reconciliation that makes the shared gauges converge to
//! it.
//!
//! The gauges in Valkey are changed by the calls that count a request
//! (`route.lua`, `claim.lua`, `inflight.lua`). When one of those passes its
//! deadline, the router routes without it, but Valkey may still run it
//! later: a count nobody will release. A release can be lost the same way.
//! So every router lease renewal sends the ledger, and `router_lease.lua`
//! sets each of this router's gauges to it: a gauge below the ledger is
//! raised at once (Valkey lost it), a gauge above it is lowered by what was
//! already above it at the previous renewal (an excess seen twice is not a
//! reply still on its way). Counts converge within two renewals.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Per model, per worker: requests counted and not yet released; and the
/// excess of the shared gauge over it at the last reconciliation.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    held: Mutex<HashMap<String, HashMap<String, u64>>>,
    excess: Mutex<HashMap<String, HashMap<String, u64>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ledger {
    /// Adds `delta` to the count of `worker` (never below zero).
    pub(crate) fn add(&self, model: &str, worker: &str, delta: i64) {
        let mut held = lock(&self.held);
        let workers = held.entry(model.to_owned()).or_default();
        let n = workers.entry(worker.to_owned()).or_default();
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            workers.remove(worker);
        }
    }

    /// The reconciliation's arguments for `model`: per worker, the count
    /// held and the excess seen last time (workers with neither omitted).
    pub(crate) fn snapshot(&self, model: &str) -> Vec<(String, u64, u64)> {
        let held = lock(&self.held);
        let excess = lock(&self.excess);
        let (h, x) = (held.get(model), excess.get(model));
        let mut workers: Vec<&String> = h.iter().flat_map(|m| m.keys()).collect();
        workers.extend(x.iter().flat_map(|m| m.keys()));
        workers.sort();
        workers.dedup();
        workers
            .into_iter()
            .map(|w| {
                let get = |m: Option<&HashMap<String, u64>>| m.and_then(|m| m.get(w)).copied();
                (w.clone(), get(h).unwrap_or(0), get(x).unwrap_or(0))
            })
            .collect()
    }

    /// Records the excess the reconciliation left for `model`.
    pub(crate) fn set_excess(&self, model: &str, excess: HashMap<String, u64>) {
        lock(&self.excess).insert(model.to_owned(), excess);
    }

    /// Forgets `model` (this router's lease for it ended).
    pub(crate) fn forget(&self, model: &str) {
        lock(&self.held).remove(model);
        lock(&self.excess).remove(model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_never_go_below_zero_and_the_snapshot_lists_both_maps() {
        let l = Ledger::default();
        l.add("m", "a", 2);
        l.add("m", "b", -1);
        l.add("m", "a", -1);
        l.set_excess("m", HashMap::from([("c".to_owned(), 3)]));
        assert_eq!(
            l.snapshot("m"),
            vec![("a".into(), 1, 0), ("c".into(), 0, 3)]
        );
        l.forget("m");
        assert!(l.snapshot("m").is_empty());
    }
}
