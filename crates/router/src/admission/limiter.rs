//! [`Limiter`]: a tenant's limits checked fleet-wide in Valkey (one call,
//! `limit_admit.lua`), or, when Valkey cannot answer within the routing
//! deadline, against this router's share of them ([`LocalBuckets`]).
//! Requests in flight are counted in this router's [`Ledger`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use state::{Gcra, LimitCheck, LimitReason, StateStore};

use super::ledger::Ledger;
use super::local::LocalBuckets;
use super::rate::{RateState, Refusal, Window};
use crate::config::TenantLimits;

/// Share of a rate limit that may be used at once, in percent (so that in
/// any window a tenant gets at most the limit plus this, plus one).
const BURST_PERCENT: u64 = 3;

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
    ledger: Arc<Ledger>,
    local: Mutex<LocalBuckets>,
    /// Live routers last seen (the degraded mode's divisor), at least 1.
    routers: AtomicU64,
}

impl Limiter {
    pub(super) fn new(store: StateStore, window: Duration) -> Self {
        Limiter {
            ledger: Arc::new(Ledger::new(store.clone())),
            store,
            window,
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
        // Counted in the ledger before the call; given back when the
        // request is refused, or when its admission is abandoned (a client
        // gone while waiting for the answer).
        let hold = holds.then(|| self.ledger.hold(tenant));
        let verdict = match self.store.limit_admit(tenant, &check, false).await {
            Ok(v) => {
                let state = self.state(limits, v.requests_debt_us, v.tokens_debt_us);
                match v.refused {
                    None => Ok((state, false)),
                    Some(reason) => Err(self.refusal(reason, state, v.wait_us, limits)),
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, tenant, "limits checked locally: Valkey did not answer");
                metrics::counter!("prefix_router_admission_degraded_total").increment(1);
                self.admit_locally(tenant, limits, &check)
                    .map(|state| (state, true))
            }
        };
        let (state, degraded) = verdict?;
        if let Some(hold) = hold {
            hold.keep();
        }
        Ok((
            state,
            Counted {
                held: holds,
                degraded,
            },
        ))
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
            let held = self.ledger.held(tenant);
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
        &self,
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
                self.ledger.unhold(&tenant);
            }
            return;
        }
        if delta == 0 && !counted.held {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, ledger) = (self.store.clone(), self.ledger.clone());
        handle.spawn(async move {
            if let Err(e) = store
                .limit_settle(&tenant, tokens, delta, counted.held)
                .await
            {
                tracing::debug!(error = %e, tenant, "limit settle lost; the lease renewal heals the count");
            }
            if counted.held {
                ledger.unhold(&tenant);
            }
        });
    }

    /// The ledger of this router's requests in flight (its lease loop).
    pub(super) fn ledger(&self) -> &Ledger {
        &self.ledger
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A store whose server accepts connections and never answers.
    async fn silent_store() -> (StateStore, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let mut settings = state::ConnectionSettings::new(&format!("redis://{addr}"));
        settings.hot_timeout = Duration::from_secs(30);
        let store = StateStore::new(
            settings,
            "pr",
            "r1",
            state::StateTtls::default(),
            state::BatchLimits::default(),
        )
        .unwrap();
        (store, server)
    }

    #[tokio::test]
    async fn an_abandoned_admission_gives_its_place_back() {
        let (store, server) = silent_store().await;
        let limiter = Limiter::new(store, Duration::from_secs(60));
        let limits = TenantLimits {
            max_concurrent: Some(1),
            ..TenantLimits::default()
        };
        // The client goes away while the admission call waits.
        let waited =
            tokio::time::timeout(Duration::from_millis(200), limiter.admit("t", &limits, 1)).await;
        assert!(waited.is_err(), "the call was still waiting");
        assert_eq!(
            limiter.ledger().held("t"),
            0,
            "the ledger kept an abandoned request"
        );
        server.abort();
    }

    #[test]
    fn limits_as_gcra() {
        let store = StateStore::new(
            state::ConnectionSettings::new("redis://127.0.0.1:1"),
            "pr",
            "r1",
            state::StateTtls::default(),
            state::BatchLimits::default(),
        )
        .unwrap();
        let limiter = Limiter::new(store, Duration::from_secs(60));
        // 120 a minute: 0.5 s each, 3 at once (3% is 3, plus the request).
        let g = limiter.gcra(120, false);
        assert_eq!(g.interval_us, 500_000);
        assert_eq!(g.tolerance_us, 4 * 500_000);
        // Tokens: no extra place for one unit.
        let t = limiter.gcra(6000, true);
        assert_eq!((t.interval_us, t.tolerance_us), (10_000, 180 * 10_000));
        // Small limits: one at a time.
        assert_eq!(limiter.gcra(2, false).tolerance_us, 30_000_000);
    }
}
