//! [`Labels`]: what flow control records about one request, by band (its
//! priority) and tenant (a configured tenant's name, every other tenant as
//! `other`: bounded label cardinality). One place for the flow metrics'
//! names and labels.

use std::time::Duration;

use super::band;
use crate::admission::RequestClass;

/// A request's labels in the flow metrics.
#[derive(Debug, Clone)]
pub(super) struct Labels {
    band: String,
    tenant: String,
}

impl Labels {
    pub(super) fn of(class: &RequestClass) -> Labels {
        Labels {
            band: band(class.priority),
            tenant: class.tenant.label().to_owned(),
        }
    }

    /// Let through: `path` is `direct`, `granted` (at once by the fleet's
    /// room), `dispatched` (after waiting) or `unavailable` (without flow
    /// control); a dispatched request's wait is recorded.
    pub(super) fn admitted(&self, path: &'static str, waited: Duration) {
        metrics::counter!("prefix_router_flow_admitted_total", "band" => self.band.clone(), "tenant" => self.tenant.clone(), "path" => path)
            .increment(1);
        if path == "dispatched" {
            self.waited("dispatched", waited);
        }
    }

    /// Put in the waiting room.
    pub(super) fn queued(&self) {
        metrics::counter!("prefix_router_flow_queued_total", "band" => self.band.clone(), "tenant" => self.tenant.clone())
            .increment(1);
    }

    /// Refused or taken out of the room, for `reason`, after `waited`.
    pub(super) fn shed(&self, reason: &'static str, waited: Duration) {
        metrics::counter!("prefix_router_flow_shed_total", "band" => self.band.clone(), "tenant" => self.tenant.clone(), "reason" => reason)
            .increment(1);
        self.waited("shed", waited);
    }

    fn waited(&self, outcome: &'static str, waited: Duration) {
        metrics::histogram!("prefix_router_flow_wait_seconds", "band" => self.band.clone(), "tenant" => self.tenant.clone(), "outcome" => outcome)
            .record(waited.as_secs_f64());
    }
}
