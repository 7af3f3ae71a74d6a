//! One request's life in the engine: [`admit`] submits it and waits for its
//! admission; the [`RequestGuard`] it returns aborts the request in the
//! engine if dropped before [`RequestGuard::finish`] (the client went away:
//! axum drops the handler future, or hyper drops the streaming body).

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::oneshot;

use super::core::SimCore;
use super::error::SimError;
use super::prompt::PromptIds;
use crate::{Admission, EngineError, KvSource, RequestId, SimRequest, Ticket};

/// Aborts its request on drop unless finished; see the module docs.
pub struct RequestGuard {
    core: Arc<SimCore>,
    id: RequestId,
    finished: bool,
}

impl RequestGuard {
    /// The request's id in the engine.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The request ran to its end: nothing to abort.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if !self.finished {
            tracing::debug!(id = %self.id, "client gone; request aborted");
            self.core.abort(self.id);
        }
    }
}

/// Submits prompt `p` with `max_tokens` to generate, whose prompt KV
/// comes from `source`, and waits until it runs. The response can only start then: its headers carry the
/// cached-token count, which admission decides.
pub async fn admit(
    core: &Arc<SimCore>,
    p: &PromptIds,
    max_tokens: usize,
    source: KvSource,
) -> Result<(RequestGuard, Admission), SimError> {
    let id = core.next_id();
    let req = SimRequest {
        id,
        block_hashes: p.hashes.clone(),
        prompt_tokens: p.tokens.len(),
        output_tokens: max_tokens,
    };
    let now = core.now();
    let submitted = {
        let mut st = core.lock();
        st.book.register(id, Arc::clone(&p.tokens), &p.hashes);
        match st.engine.submit_from(req, source, now) {
            Ok(Ticket::Admitted(a)) => Submitted::Running(a),
            Ok(Ticket::Queued { .. }) => {
                let (tx, rx) = oneshot::channel();
                st.waiters.insert(id, tx);
                Submitted::Queued(rx)
            }
            Err(e) => {
                st.book.release(id);
                return Err(refused(e));
            }
        }
    };
    core.wake();
    // From here a dropped future aborts the request.
    let guard = RequestGuard {
        core: Arc::clone(core),
        id,
        finished: false,
    };
    let admission = match submitted {
        Submitted::Running(a) => a,
        Submitted::Queued(rx) => rx.await.map_err(|_| {
            SimError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailableError",
                "the request could not be scheduled",
            )
        })?,
    };
    Ok((guard, admission))
}

enum Submitted {
    Running(Admission),
    Queued(oneshot::Receiver<Admission>),
}

/// The answer to a request the engine refused, as vLLM words it.
fn refused(e: EngineError) -> SimError {
    match e {
        EngineError::TooLarge {
            blocks, capacity, ..
        } => SimError::new(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            format!(
                "This model's KV cache holds {capacity} blocks, but the request needs {blocks} \
                 (prompt plus max_tokens). Please reduce the length of the prompt or max_tokens."
            ),
        ),
        EngineError::InvalidRequest { reason, .. } => {
            SimError::new(StatusCode::BAD_REQUEST, "BadRequestError", reason)
        }
        other => SimError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            other.to_string(),
        ),
    }
}
