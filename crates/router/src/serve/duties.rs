//! The background duties of a router, run by one task until shutdown
//! (`duties_loop`): its lease on every model and the static workers'
//! leases, gc, the drain marks relays watch; and the end of its leases at
//! shutdown (`end_router_leases`).
//!
//! One task on one timer: the duties fall due together where their
//! periods meet (the lease and gc every second, the drain marks every
//! [`DRAIN_REFRESH`]), so an idle router wakes twice a second rather than
//! once per duty and tick; and the model list read for the lease serves
//! the others (one `SMEMBERS` per lease period rather than one per duty
//! and tick: the drain marks alone read it twice a second).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::ShutdownSignal;
use crate::admission::Admission;
use crate::config::ServeConfig;
use crate::proxy::{DRAIN_REFRESH, Proxy};
use state::{StateStore, WorkerHeartbeat};

/// What the duties need.
pub(super) struct Duties {
    pub store: StateStore,
    pub cfg: ServeConfig,
    pub admission: Arc<Admission>,
    pub proxy: Arc<Proxy>,
}

/// When a duty is next due, every `period` from the loop's start.
struct Due {
    period: Duration,
    next: Instant,
}

impl Due {
    fn new(start: Instant, period: Duration, first: Duration) -> Self {
        Due {
            period: period.max(Duration::from_millis(1)),
            next: start + first,
        }
    }

    /// Whether it is due at `now`; if so, the next time is set (a time
    /// missed while the duties ran is skipped, not run late twice).
    fn take(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        while self.next <= now {
            self.next += self.period;
        }
        true
    }
}

/// Runs the duties, each when due, until stop is signalled: the lease
/// first at once, gc and the drain marks one period after the start.
pub(super) async fn duties_loop(duties: Duties, mut stop: ShutdownSignal) {
    // At least every second: after Valkey restarts empty, static workers
    // are unknown (404s) until their next heartbeat here.
    let cfg = &duties.cfg;
    let lease_period =
        (cfg.ttls.router_lease.min(cfg.ttls.worker_lease) / 3).min(Duration::from_secs(1));
    let start = Instant::now();
    let mut lease = Due::new(start, lease_period, Duration::ZERO);
    let mut drains = Due::new(start, DRAIN_REFRESH, DRAIN_REFRESH);
    let mut gc = Due::new(start, cfg.gc_interval, cfg.gc_interval);
    // The models as last read; a failed read keeps the last list.
    let mut models: Vec<String> = Vec::new();
    loop {
        let now = Instant::now();
        if lease.take(now)
            && let Some(read) = renew_leases(&duties).await
        {
            models = read;
        }
        if drains.take(now) {
            refresh_drains(&duties, &models).await;
        }
        if gc.take(now) {
            collect(&duties.store, &models).await;
        }
        let next = lease.next.min(drains.next).min(gc.next);
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {
                if *stop.borrow() {
                    return;
                }
            }
            _ = stop.changed() => return,
        }
    }
}

/// Renews this router's lease on every model and the static workers'
/// leases; the live routers seen are the degraded limits' divisor. The
/// models read, unless the read failed.
async fn renew_leases(duties: &Duties) -> Option<Vec<String>> {
    let Duties {
        store,
        cfg,
        admission,
        ..
    } = duties;
    if let Some(model) = &cfg.model {
        for w in &cfg.workers {
            let hb = WorkerHeartbeat {
                worker_id: w.id.clone(),
                url: w.url.clone(),
                load: None,
            };
            if let Err(e) = store.heartbeat(model, &hb).await {
                tracing::warn!(error = %e, worker = %w.id, "static worker lease not renewed");
            }
        }
    }
    let models = match store.models().await {
        Ok(models) => models,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list models");
            return None;
        }
    };
    let mut live = 0;
    for m in &models {
        match store.router_lease(m, cfg.ttls.router_lease).await {
            Ok(n) => live = live.max(n),
            Err(e) => tracing::warn!(error = %e, model = %m, "router lease not renewed"),
        }
    }
    if live > 0 {
        admission.set_live_routers(live);
    }
    Some(models)
}

/// Reads which workers drain, and their deadlines: relays move the
/// answers still running on a draining worker at its deadline.
async fn refresh_drains(duties: &Duties, models: &[String]) {
    if let Err(e) = duties.proxy.drains().refresh(&duties.store, models).await {
        tracing::debug!(error = %e, "drain marks not refreshed");
    }
}

/// Runs gc over every model; every router does, the scripts make it safe.
async fn collect(store: &StateStore, models: &[String]) {
    for m in models {
        match store.gc(m, 64).await {
            Ok(r) if r.expired_workers > 0 => {
                tracing::info!(model = %m, expired = r.expired_workers, purged = r.purged_entries, "worker leases expired")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, model = %m, "gc failed"),
        }
    }
}

/// Ends this router's lease on every model (at shutdown): the others
/// stop counting it at once.
pub(super) async fn end_router_leases(store: &StateStore) {
    if let Ok(models) = store.models().await {
        for m in models {
            let _ = store.router_lease(&m, Duration::from_millis(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duties_fall_due_on_their_periods_and_skip_missed_times() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Due::new(start, ms(500), ms(500));
        assert!(!d.take(start));
        assert!(d.take(start + ms(500)));
        assert_eq!(d.next, start + ms(1000));
        // Late by two periods: runs once, next on the schedule.
        assert!(d.take(start + ms(2100)));
        assert_eq!(d.next, start + ms(2500));
        assert!(!d.take(start + ms(2400)));
        let mut now = Due::new(start, ms(1000), Duration::ZERO);
        assert!(now.take(start));
        assert_eq!(now.next, start + ms(1000));
    }
}
