//! Graceful drain on shutdown: the reporter marks its worker draining in
//! the fleet (every router stops sending it new requests at once), waits
//! until the engine runs nothing (its scraped load: no request running or
//! waiting) or the drain deadline, when the routers move the answers
//! still running; then it deregisters the worker. Without `--engine-url`
//! it cannot see the engine's requests, and waits the whole deadline.
//! `GET /drain` on the reporter's metrics listener does the same without
//! stopping (a Kubernetes `preStop` hook: the engine gets SIGTERM only once
//! the hook returns), answered once drained.

use std::sync::Mutex;
use std::time::Duration;

use protocol::WorkerLoad;
use tokio::time::Instant;

use crate::push::Pusher;

/// How often the scraped load is looked at while draining.
const POLL: Duration = Duration::from_millis(250);

/// `GET /drain`: asks the reporter's loop to drain, answers when done.
pub(super) async fn on_request(
    drains: tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
) -> (axum::http::StatusCode, &'static str) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if drains.send(tx).await.is_err() || rx.await.is_err() {
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "the reporter is stopping\n",
        );
    }
    (axum::http::StatusCode::OK, "drained\n")
}

/// Drains the worker for up to `deadline` (see the module docs).
pub(super) async fn drain(
    pusher: &Pusher,
    load: &Mutex<Option<WorkerLoad>>,
    deadline: Duration,
    scraped: bool,
) {
    if deadline.is_zero() {
        return;
    }
    let until = Instant::now() + deadline;
    if let Err(e) = pusher.drain(deadline).await {
        tracing::warn!(error = %e, "not marked draining in the fleet; deregistering at once");
        return;
    }
    tracing::info!(
        ?deadline,
        "worker draining: no new requests; waiting for the engine's answers"
    );
    if !scraped {
        tokio::time::sleep_until(until).await;
        return;
    }
    // Requests routed just before the mark may still arrive, and a scrape
    // taken before them may say idle: the first look waits a poll longer
    // than a scrape would take.
    tokio::time::sleep(POLL * 4).await;
    while Instant::now() < until {
        let idle = load
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|l| l.num_requests_running == 0 && l.num_requests_waiting == 0);
        if idle {
            tracing::info!("the engine runs nothing: drained");
            return;
        }
        tokio::time::sleep(POLL.min(until.saturating_duration_since(Instant::now()))).await;
    }
    tracing::info!("drain deadline reached; the routers move what still runs");
}
