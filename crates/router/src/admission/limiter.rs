//! [`Limiter`]: a tenant's limits checked fleet-wide in Valkey (one call,
//! `limit_admit.lua`), or, when Valkey cannot answer within the routing
//! deadline, against this router's share of them ([`LocalBuckets`]).
//!
//! Requests in flight are counted per router under a lease: this router's
//! ledger counts a request from before its admission call until after its
//! release call, and the lease loop sets the router's count in Valkey to
//! the ledger's (`limit_lease.lua`), so a lost release heals and a router
//! that dies stops holding its tenants' places when its lease expires.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use state::{Gcra, LimitCheck, LimitReason, StateStore};

use super::local::LocalBuckets;
use super::rate::{RateState, Refusal, Window};
use crate::config::TenantLimits;

/// Share of a rate limit that may be used at once, in percent (so that in
/// any window a tenant gets at most the limit plus this, plus one).
const BURST_PERCENT: u64 = 4;

/// Requests held in flight for one tenant by this router.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    count: u64,
    /// Changed since the last lease renewal.
    dirty: bool,
}

/// How an admitted request was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counted {
    /// A place in flight is held (in the ledger, and in Valkey unless
    /// degraded).
    pub(super) held: bool,
    /// Decided locally, Valkey away.
    pub(super) degraded: bool,
}

/// The fleet-wide limits of every tenant, as this router applies them.
pub(super) struct Limiter {
    store: StateStore,
    window: Duration,
    lease: Duration,
    ledger: Mutex<HashMap<String, Held>>,
    local: Mutex<LocalBuckets>,
    /// Live routers last seen (the degraded mode's divisor), at least 1.
    routers: AtomicU64,
}

impl Limiter {
    pub(super) fn new(store: StateStore, window: Duration) -> Self {
        let lease = store.ttls().router_lease;
        Limiter {
            store,
            window,
            lease,
            ledger: Mutex::new(HashMap::new()),
            local: Mutex::new(LocalBuckets::new()),
            routers: AtomicU64::new(1),
        }
    }

    pub(super) fn set_live_routers(&self, n: u64) {
        self.routers.store(n.max(1), Ordering::Relaxed);
    }

    /// A limit of `limit` per window as a GCRA; `tokens` limits have no
    /// extra place for one unit (a request may need the whole tolerance).
    pub(super) fn gcra(&self, limit: u64, tokens: bool) -> Gcra {
        let window_us = u64::try_from(self.window.as_micros()).unwrap_or(u64::MAX);
        let interval_us = (window_us / limit.max(1)).max(1);
        let burst = limit * BURST_PERCENT / 100 + u64::from(!tokens);
        Gcra {
            interval_us,
            tolerance_us: burst.max(1) * interval_us,
        }
    }

    /// Admits one request of `tenant` costing `cost` tokens against
    /// `limits` (at least one of which is set).
    pub(super) async fn admit(
        &self,
        tenant: &str,
        limits: &TenantLimits,
        cost: u64,
    ) -> Result<(RateState, Counted), Refusal> {
        let check = LimitCheck {
            requests: limits.requests_per_minute.map(|l| self.gcra(l, false)),
            tokens: limits.tokens_per_minute.map(|l| self.gcra(l, true)),
            cost,
            max_concurrent: limits.max_concurrent,
        };
        if let Some(limit) = limits.tokens_per_minute
            && cost > limit
        {
            return Err(Refusal {
                reason: LimitReason::Tokens,
                state: self.state(limits, 0, 0),
                retry_after: self.window,
                message: format!(
                    "this request needs {cost} tokens (prompt and max_tokens), more than the {limit} its tenant may use per {}; lower max_tokens",
                    window_name(self.window)
                ),
            });
        }
        let holds = limits.max_concurrent.is_some();
        if holds {
            self.hold(tenant, 1);
        }
        match self.store.limit_admit(tenant, &check, false).await {
            Ok(v) => {
                let state = self.state(limits, v.requests_debt_us, v.tokens_debt_us);
                match v.refused {
                    None => Ok((
                        state,
                        Counted {
                            held: holds,
                            degraded: false,
                        },
                    )),
                    Some(reason) => {
                        if holds {
                            self.unhold(tenant);
                        }
                        Err(self.refusal(reason, state, v.wait_us, limits))
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, tenant, "limits checked locally: Valkey did not answer");
                metrics::counter!("prefix_router_admission_degraded_total").increment(1);
                let verdict = self.admit_locally(tenant, limits, &check);
                if verdict.is_err() && holds {
                    self.unhold(tenant);
                }
                verdict.map(|state| {
                    (
                        state,
                        Counted {
                            held: holds,
                            degraded: true,
                        },
                    )
                })
            }
        }
    }

    /// The degraded decision: this router's share of each limit.
    fn admit_locally(
        &self,
        tenant: &str,
        limits: &TenantLimits,
        check: &LimitCheck,
    ) -> Result<RateState, Refusal> {
        let routers = self.routers.load(Ordering::Relaxed).max(1);
        let share = |l: u64| (l / routers).max(1);
        let shared = TenantLimits {
            requests_per_minute: limits.requests_per_minute.map(share),
            tokens_per_minute: limits.tokens_per_minute.map(share),
            max_concurrent: limits.max_concurrent.map(share),
        };
        if let Some(max) = shared.max_concurrent {
            // The ledger already counts this request.
            let held = self.held(tenant);
            if held > max {
                return Err(self.refusal(
                    LimitReason::Concurrency,
                    self.state(&shared, 0, 0),
                    0,
                    &shared,
                ));
            }
        }
        let gcras = [
            shared.requests_per_minute.map(|l| self.gcra(l, false)),
            shared.tokens_per_minute.map(|l| self.gcra(l, true)),
        ];
        let verdict = self
            .local
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(tenant, gcras, check.cost);
        match verdict {
            Ok([rq, tk]) => Ok(self.state(&shared, rq, tk)),
            Err((reason, wait)) => {
                Err(self.refusal(reason, self.state(&shared, 0, 0), wait, &shared))
            }
        }
    }

    fn refusal(
        &self,
        reason: LimitReason,
        mut state: RateState,
        wait_us: u64,
        limits: &TenantLimits,
    ) -> Refusal {
        let per = window_name(self.window);
        let message = match reason {
            LimitReason::Requests => format!(
                "rate limit reached: {} requests per {per} for this tenant; retry later",
                limits.requests_per_minute.unwrap_or(0)
            ),
            LimitReason::Tokens => format!(
                "rate limit reached: {} tokens per {per} for this tenant; retry later",
                limits.tokens_per_minute.unwrap_or(0)
            ),
            LimitReason::Concurrency => format!(
                "too many requests in flight: at most {} at once for this tenant",
                limits.max_concurrent.unwrap_or(0)
            ),
        };
        let w = match reason {
            LimitReason::Requests => state.requests.as_mut(),
            LimitReason::Tokens => state.tokens.as_mut(),
            LimitReason::Concurrency => None,
        };
        if let Some(w) = w {
            w.remaining = 0;
        }
        let retry_after = match reason {
            LimitReason::Concurrency => Duration::from_secs(1),
            _ => Duration::from_micros(wait_us),
        };
        Refusal {
            reason,
            state,
            retry_after,
            message,
        }
    }

    /// The standing of `limits` with arrival times `rq_us` and `tk_us`
    /// ahead of now.
    fn state(&self, limits: &TenantLimits, rq_us: u64, tk_us: u64) -> RateState {
        let w = |limit: Option<u64>, debt: u64| {
            limit.map(|l| Window::new(l, self.window, Duration::from_micros(debt)))
        };
        RateState {
            requests: w(limits.requests_per_minute, rq_us),
            tokens: w(limits.tokens_per_minute, tk_us),
        }
    }

    /// What `tenant`'s limits stand at and whether a request would pass,
    /// without changing anything (explain).
    pub(super) async fn peek(
        &self,
        tenant: &str,
        limits: &TenantLimits,
        cost: u64,
    ) -> Result<(Option<LimitReason>, RateState, u64), state::StateError> {
        let check = LimitCheck {
            requests: limits.requests_per_minute.map(|l| self.gcra(l, false)),
            tokens: limits.tokens_per_minute.map(|l| self.gcra(l, true)),
            cost,
            max_concurrent: limits.max_concurrent,
        };
        let v = self.store.limit_admit(tenant, &check, true).await?;
        Ok((
            v.refused,
            self.state(limits, v.requests_debt_us, v.tokens_debt_us),
            v.in_flight,
        ))
    }

    /// The end of an admitted request: tokens corrected by `delta`, its
    /// place in flight released; off the request path.
    pub(super) fn settle(
        self: &std::sync::Arc<Self>,
        tenant: String,
        tokens: Option<Gcra>,
        delta: i64,
        counted: Counted,
    ) {
        if counted.degraded {
            if let Some(g) = tokens
                && delta != 0
            {
                self.local
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .correct(&tenant, g, delta);
            }
            // Valkey's count (if the admission reached it) is set from the
            // ledger at the next lease renewal.
            if counted.held {
                self.unhold(&tenant);
            }
            return;
        }
        if delta == 0 && !counted.held {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        handle.spawn(async move {
            if let Err(e) = this
                .store
                .limit_settle(&tenant, tokens, delta, counted.held)
                .await
            {
                tracing::debug!(error = %e, tenant, "limit settle lost; the lease renewal heals the count");
            }
            if counted.held {
                this.unhold(&tenant);
            }
        });
    }

    fn hold(&self, tenant: &str, n: u64) {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let held = ledger.entry(tenant.to_owned()).or_default();
        held.count += n;
        held.dirty = true;
    }

    fn unhold(&self, tenant: &str) {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = ledger.get_mut(tenant) {
            held.count = held.count.saturating_sub(1);
            held.dirty = true;
        }
    }

    fn held(&self, tenant: &str) -> u64 {
        let ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        ledger.get(tenant).map_or(0, |h| h.count)
    }

    /// Renews this router's lease on every tenant it holds requests of (or
    /// held since the last renewal), setting its counts to the ledger's.
    pub(super) async fn renew(&self) {
        let snapshot: Vec<(String, u64)> = {
            let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
            ledger.retain(|_, h| h.count > 0 || h.dirty);
            ledger
                .iter_mut()
                .map(|(t, h)| {
                    h.dirty = false;
                    (t.clone(), h.count)
                })
                .collect()
        };
        for (tenant, count) in snapshot {
            if let Err(e) = self.store.limit_lease(&tenant, count, self.lease).await {
                tracing::debug!(error = %e, tenant, "tenant lease not renewed");
                self.ledger
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

/// `minute`, or the window's length when shortened.
fn window_name(window: Duration) -> String {
    if window == Duration::from_secs(60) {
        "minute".into()
    } else {
        format!("{window:?}")
    }
}
