//! The background duties of a router, each run until shutdown: its
//! lease on every model and the static workers' leases (`lease_loop`),
//! gc (`gc_loop`), the drain marks relays watch (`drain_loop`); and the
//! end of its leases at shutdown.
//!
//! The model list is read once per lease period, by `lease_loop`, and
//! handed to the other duties through a [`ModelList`]: one `SMEMBERS` a
//! second per router rather than one per duty and tick (the drain marks
//! alone were read twice a second).

use std::sync::Arc;
use std::time::Duration;

use super::ShutdownSignal;
use crate::admission::Admission;
use crate::config::ServeConfig;
use crate::proxy::{DRAIN_REFRESH, Proxy};
use state::{StateStore, WorkerHeartbeat};

/// The namespace's models as `lease_loop` last read them (empty until its
/// first read; a failed read keeps the last list).
#[derive(Clone)]
pub(super) struct ModelList(tokio::sync::watch::Receiver<Arc<[String]>>);

impl ModelList {
    /// A list and the sender `lease_loop` publishes each read to.
    pub(super) fn new() -> (tokio::sync::watch::Sender<Arc<[String]>>, ModelList) {
        let (tx, rx) = tokio::sync::watch::channel(Arc::from(Vec::new()));
        (tx, ModelList(rx))
    }

    fn current(&self) -> Arc<[String]> {
        self.0.borrow().clone()
    }
}

/// Sleeps `period`, or returns false once stop is signalled.
async fn tick(stop: &mut ShutdownSignal, period: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(period) => !*stop.borrow(),
        _ = stop.changed() => false,
    }
}

/// Renews this router's lease on every model and the static workers'
/// leases; the live routers seen are the degraded limits' divisor.
pub(super) async fn lease_loop(
    store: StateStore,
    cfg: ServeConfig,
    admission: Arc<Admission>,
    models_tx: tokio::sync::watch::Sender<Arc<[String]>>,
    mut stop: ShutdownSignal,
) {
    // At least every second: after Valkey restarts empty, static workers
    // are unknown (404s) until their next heartbeat here.
    let period = (cfg.ttls.router_lease.min(cfg.ttls.worker_lease) / 3).min(Duration::from_secs(1));
    loop {
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
        match store.models().await {
            Ok(models) => {
                let models: Arc<[String]> = models.into();
                models_tx.send_replace(models.clone());
                let mut live = 0;
                for m in models.iter() {
                    match store.router_lease(m, cfg.ttls.router_lease).await {
                        Ok(n) => live = live.max(n),
                        Err(e) => {
                            tracing::warn!(error = %e, model = %m, "router lease not renewed")
                        }
                    }
                }
                if live > 0 {
                    admission.set_live_routers(live);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list models"),
        }
        if !tick(&mut stop, period).await {
            return;
        }
    }
}

/// Reads which workers drain, and their deadlines, every
/// [`DRAIN_REFRESH`]: relays move the answers still running on a draining
/// worker at its deadline.
pub(super) async fn drain_loop(
    store: StateStore,
    proxy: Arc<Proxy>,
    models: ModelList,
    mut stop: ShutdownSignal,
) {
    while tick(&mut stop, DRAIN_REFRESH).await {
        if let Err(e) = proxy.drains().refresh(&store, &models.current()).await {
            tracing::debug!(error = %e, "drain marks not refreshed");
        }
    }
}

/// Runs gc over every model; every router does, the scripts make it safe.
pub(super) async fn gc_loop(
    store: StateStore,
    period: Duration,
    models: ModelList,
    mut stop: ShutdownSignal,
) {
    while tick(&mut stop, period).await {
        for m in models.current().iter() {
            match store.gc(m, 64).await {
                Ok(r) if r.expired_workers > 0 => {
                    tracing::info!(model = %m, expired = r.expired_workers, purged = r.purged_entries, "worker leases expired")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, model = %m, "gc failed"),
            }
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
