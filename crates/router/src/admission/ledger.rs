//! [`Ledger`]: this router's requests in flight per tenant, and its lease
//! on them in Valkey.
//!
//! A request is counted from before its admission call until after its
//! release call ([`Hold`] gives an abandoned or refused one back); the
//! lease loop sets the router's count in Valkey to the ledger's
//! (`limit_lease.lua`), so a lost release heals and a router that dies
//! stops holding its tenants' places when its lease expires.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use state::StateStore;

/// Requests held in flight for one tenant by this router.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    count: u64,
    /// Changed since the last lease renewal.
    dirty: bool,
}

/// This router's requests in flight, per tenant.
pub(super) struct Ledger {
    store: StateStore,
    lease: Duration,
    held: Mutex<HashMap<String, Held>>,
}

/// A request counted in the ledger until it is kept (admitted) or dropped
/// (refused, abandoned).
pub(super) struct Hold<'a> {
    ledger: &'a Ledger,
    tenant: &'a str,
    kept: bool,
}

impl Hold<'_> {
    /// Admitted: the ticket releases it at the answer's end.
    pub(super) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.ledger.unhold(self.tenant);
        }
    }
}

impl Ledger {
    pub(super) fn new(store: StateStore) -> Self {
        let lease = store.ttls().router_lease;
        Ledger {
            store,
            lease,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one request of `tenant` until the hold is kept or dropped.
    pub(super) fn hold<'a>(&'a self, tenant: &'a str) -> Hold<'a> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let h = held.entry(tenant.to_owned()).or_default();
        h.count += 1;
        h.dirty = true;
        Hold {
            ledger: self,
            tenant,
            kept: false,
        }
    }

    /// One request of `tenant` fewer.
    pub(super) fn unhold(&self, tenant: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = held.get_mut(tenant) {
            h.count = h.count.saturating_sub(1);
            h.dirty = true;
        }
    }

    /// `tenant`'s requests counted now.
    pub(super) fn held(&self, tenant: &str) -> u64 {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(tenant).map_or(0, |h| h.count)
    }

    /// Renews this router's lease on every tenant it holds requests of (or
    /// held since the last renewal), setting its counts to the ledger's.
    pub(super) async fn renew(&self) {
        let snapshot: Vec<(String, u64)> = {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            held.retain(|_, h| h.count > 0 || h.dirty);
            held.iter_mut()
                .map(|(t, h)| {
                    h.dirty = false;
                    (t.clone(), h.count)
                })
                .collect()
        };
        for (tenant, count) in snapshot {
            if let Err(e) = self.store.limit_lease(&tenant, count, self.lease).await {
                tracing::debug!(error = %e, tenant, "tenant lease not renewed");
                self.held
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(tenant)
                    .or_default()
                    .dirty = true;
            }
        }
    }

    /// How often [`renew`](Self::renew) runs: a third of the lease.
    pub(super) fn renew_period(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(100))
    }
}
