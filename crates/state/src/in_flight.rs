//! This router's own ledger of its requests in flight, per model and
//! worker, and the reconciliation that makes the shared gauges converge to
//! it.
//!
//! The gauges in Valkey are changed by the calls that count a request
//! (`route.lua`, `claim.lua`, `change_in_flight.lua`). When one of those passes its
//! deadline, the router routes without it, but Valkey may still run it
//! later: a count nobody will release. A release can be lost the same way.
//! So every router lease renewal sends the ledger, and `router_lease.lua`
//! sets each of this router's gauges to it: a gauge below the ledger is
//! raised at once (Valkey lost it), a gauge above it is lowered by what was
//! already above it at the previous renewal (an excess seen twice is not a
//! reply still on its way). Counts converge within two renewals.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A router's in-flight gauges for one worker, or a change of them: its
/// requests, and their uncached prompt tokens still before a first token
/// (the prefill queue the router put on the worker).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Requests.
    pub requests: i64,
    /// Uncached prompt tokens of those requests before their first token.
    pub prefill_tokens: i64,
}

impl InFlight {
    /// `n` requests, no prefill tokens.
    pub fn requests(n: i64) -> Self {
        InFlight {
            requests: n,
            prefill_tokens: 0,
        }
    }

    /// `n` prefill tokens, no request.
    pub fn prefill_tokens(n: i64) -> Self {
        InFlight {
            requests: 0,
            prefill_tokens: n,
        }
    }

    /// Both figures summed.
    pub fn plus(self, other: InFlight) -> Self {
        InFlight {
            requests: self.requests.saturating_add(other.requests),
            prefill_tokens: self.prefill_tokens.saturating_add(other.prefill_tokens),
        }
    }

    /// Each figure at least zero.
    fn at_least_zero(self) -> Self {
        InFlight {
            requests: self.requests.max(0),
            prefill_tokens: self.prefill_tokens.max(0),
        }
    }

    /// No change (or nothing held).
    pub fn is_zero(&self) -> bool {
        self.requests == 0 && self.prefill_tokens == 0
    }

    /// The part of a change that adds (each figure's increase, if any).
    pub(crate) fn increase(self) -> Self {
        self.at_least_zero()
    }

    /// The part of a change that takes away (each figure's decrease).
    pub(crate) fn decrease(self) -> Self {
        InFlight {
            requests: self.requests.min(0),
            prefill_tokens: self.prefill_tokens.min(0),
        }
    }
}

/// Per model, per worker: what is counted and not yet released; and the
/// excess of the shared gauges over it at the last reconciliation.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    held: Mutex<HashMap<String, HashMap<String, InFlight>>>,
    excess: Mutex<HashMap<String, HashMap<String, InFlight>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ledger {
    /// Adds `delta` to the gauges of `worker` (each never below zero).
    pub(crate) fn add(&self, model: &str, worker: &str, delta: InFlight) {
        if delta.is_zero() {
            return;
        }
        let mut held = lock(&self.held);
        let workers = held.entry(model.to_owned()).or_default();
        let n = workers.entry(worker.to_owned()).or_default();
        *n = n.plus(delta).at_least_zero();
        if n.is_zero() {
            workers.remove(worker);
        }
    }

    /// The reconciliation's arguments for `model`: per worker, what is
    /// held and the excess seen last time (workers with neither omitted).
    pub(crate) fn snapshot(&self, model: &str) -> Vec<(String, InFlight, InFlight)> {
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
                let get = |m: Option<&HashMap<String, InFlight>>| {
                    m.and_then(|m| m.get(w)).copied().unwrap_or_default()
                };
                (w.clone(), get(h), get(x))
            })
            .collect()
    }

    /// Records the excess the reconciliation left for `model`.
    pub(crate) fn set_excess(&self, model: &str, excess: HashMap<String, InFlight>) {
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
        let both = |requests, prefill_tokens| InFlight {
            requests,
            prefill_tokens,
        };
        l.add("m", "a", both(2, 900));
        l.add("m", "b", InFlight::requests(-1));
        l.add("m", "a", both(-1, -1000));
        l.set_excess("m", HashMap::from([("c".to_owned(), both(3, 40))]));
        assert_eq!(
            l.snapshot("m"),
            vec![
                ("a".into(), both(1, 0), InFlight::default()),
                ("c".into(), InFlight::default(), both(3, 40))
            ]
        );
        l.forget("m");
        assert!(l.snapshot("m").is_empty());
    }
}
