//! [`InFlightGuard`]: a request counted in flight until it ends, however,
//! and its prefill until its first byte.

use state::{InFlight, StateStore};

/// Takes this router's count of a request off a worker's gauges: its
/// prefill tokens at the response's first byte ([`first_byte`]), the
/// request (and the tokens, if still there) when dropped: after the
/// response body ends, fails, or the client goes away.
///
/// [`first_byte`]: InFlightGuard::first_byte
pub struct InFlightGuard {
    store: StateStore,
    model: String,
    worker_id: String,
    /// What is counted and not yet taken off; `None`: nothing was counted
    /// (fallback routing while Valkey is away).
    counted: Option<InFlight>,
}

impl InFlightGuard {
    /// A guard for a request counted in flight with `prefill_tokens`
    /// (`Some`), or a no-op one (`None`).
    pub fn new(
        store: StateStore,
        model: &str,
        worker_id: &str,
        prefill_tokens: Option<u64>,
    ) -> Self {
        InFlightGuard {
            store,
            model: model.to_owned(),
            worker_id: worker_id.to_owned(),
            counted: prefill_tokens.map(|t| InFlight {
                requests: 1,
                prefill_tokens: i64::try_from(t).unwrap_or(i64::MAX),
            }),
        }
    }

    /// The worker sent the response's first byte: its prefill of this
    /// request is over, so it no longer delays other requests' first token.
    pub fn first_byte(&mut self) {
        let Some(counted) = self.counted.as_mut() else {
            return;
        };
        if counted.prefill_tokens == 0 {
            return;
        }
        let tokens = std::mem::take(&mut counted.prefill_tokens);
        // A prefill's end goes out with the store's next batch, or with
        // this request's end if that comes first (`change_in_flight`):
        // queued here, without a task of its own.
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let done = InFlight::prefill_tokens(-tokens);
        if let Err(e) = self
            .store
            .release_in_flight(&self.model, &self.worker_id, done)
        {
            tracing::debug!(error = %e, worker = self.worker_id, "prefill end lost; the router lease bounds it");
        }
    }

    /// The worker now prefills `tokens` more than were counted (a decode
    /// worker left to compute the prompt itself when no prefill worker
    /// could): they count until the first byte, as a request's own do.
    pub fn add_prefill(&mut self, tokens: u64) {
        let Some(counted) = self.counted.as_mut() else {
            return;
        };
        let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
        if tokens == 0 {
            return;
        }
        counted.prefill_tokens = counted.prefill_tokens.saturating_add(tokens);
        self.release(InFlight::prefill_tokens(tokens));
    }

    /// Applies `delta` to the worker's counts, off the request path (a
    /// release, or an addition): by a task of its own, so that the shared
    /// counts see a request's end at once (flow control hands its place to
    /// a waiting request; a release batched with the store's next flush
    /// let a waiting request past a busy worker under load, in
    /// `flow_control::a_waiting_request_is_routed_when_the_worker_frees`).
    fn release(&self, delta: InFlight) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, model, worker) = (
            self.store.clone(),
            self.model.clone(),
            self.worker_id.clone(),
        );
        handle.spawn(async move {
            if let Err(e) = store.change_in_flight(&model, &worker, delta).await {
                tracing::debug!(error = %e, worker, "in-flight change lost; the router lease bounds it");
            }
        });
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if let Some(counted) = self.counted.take() {
            self.release(InFlight {
                requests: -counted.requests,
                prefill_tokens: -counted.prefill_tokens,
            });
        }
    }
}
