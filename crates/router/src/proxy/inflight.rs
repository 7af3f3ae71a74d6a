//! [`InFlightGuard`]: a request counted in flight until it ends, however.

use state::StateStore;

/// Decrements this router's in-flight count for a worker when dropped:
/// after the response body ends, fails, or the client goes away.
pub struct InFlightGuard {
    store: StateStore,
    model: String,
    worker_id: String,
    counted: bool,
}

impl InFlightGuard {
    /// A guard for a request `assign` counted (`counted`), or a no-op one
    /// (fallback routing while Valkey is away).
    pub fn new(store: StateStore, model: &str, worker_id: &str, counted: bool) -> Self {
        InFlightGuard {
            store,
            model: model.to_owned(),
            worker_id: worker_id.to_owned(),
            counted,
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let (store, model, worker) = (
            self.store.clone(),
            std::mem::take(&mut self.model),
            std::mem::take(&mut self.worker_id),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(e) = store.add_in_flight(&model, &worker, -1).await {
                    tracing::debug!(error = %e, worker, "in-flight decrement lost; the router lease bounds it");
                }
            });
        }
    }
}
