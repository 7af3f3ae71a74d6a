//! Errors of the shared state, classified by what a caller can do about them.

use std::time::Duration;

/// Why a state operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Valkey could not be reached or dropped the connection; retry later.
    #[error("valkey unavailable: {0}")]
    Unavailable(String),
    /// Valkey did not answer within the configured deadline.
    #[error("valkey did not answer within {0:?}")]
    Timeout(Duration),
    /// The worker has no live lease for this model (never registered or expired).
    #[error(
        "unknown worker {worker_id:?} for model {model:?}: no live lease (send a heartbeat first)"
    )]
    UnknownWorker {
        /// The worker id the caller named.
        worker_id: String,
        /// The model the operation was for.
        model: String,
    },
    /// An argument the caller gave cannot be stored (bad name, too many hashes).
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// The argument at fault.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The worker is registered with another URL until its lease lapses or
    /// it is drained: a live worker's URL is bound to its registration.
    #[error(
        "worker {worker_id:?} of model {model:?} is registered with another url until its lease lapses or it is drained"
    )]
    UrlConflict {
        /// The worker id the caller named.
        worker_id: String,
        /// The model the operation was for.
        model: String,
    },
    /// A worker of a new model would exceed the namespace's model cap.
    #[error(
        "this fleet already has {max} models (--max-models); a worker of another model is refused"
    )]
    TooManyModels {
        /// The cap.
        max: usize,
    },
    /// A chunk of this staged sync was refused: the sync was aborted, and
    /// its later chunks and its commit are refused (the worker's block set
    /// is not replaced by part of a snapshot). Start a new sync.
    #[error(
        "sync {sync_id:?} was aborted because one of its chunks was refused; send the snapshot again under a new sync_id"
    )]
    SyncAborted {
        /// The sync id the caller named.
        sync_id: String,
    },
    /// A script failed or replied in a shape the code does not expect.
    #[error("script {script} failed: {detail}")]
    Script {
        /// The script's file name.
        script: &'static str,
        /// The server's message or the decoding problem.
        detail: String,
    },
}

impl From<protocol::InvalidName> for StateError {
    fn from(e: protocol::InvalidName) -> Self {
        StateError::Invalid {
            what: e.what,
            detail: e.detail.into(),
        }
    }
}

impl StateError {
    /// Classifies a client error from a command of `script`.
    pub(crate) fn from_redis(script: &'static str, err: redis::RedisError) -> Self {
        // Errors that say "not now" rather than "not this": Valkey loading
        // its AOF after a restart, a replica after failover, out of memory.
        // Routing falls back on them as on an unreachable Valkey.
        const NOT_NOW: [&str; 7] = [
            "LOADING",
            "READONLY",
            "OOM",
            "MASTERDOWN",
            "TRYAGAIN",
            "CLUSTERDOWN",
            "BUSY",
        ];
        if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_timeout()
            || err.code().is_some_and(|c| NOT_NOW.contains(&c))
        {
            return StateError::Unavailable(err.to_string());
        }
        StateError::Script {
            script,
            detail: err.to_string(),
        }
    }

    /// True when the failure is Valkey's availability rather than the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StateError::Unavailable(_) | StateError::Timeout(_))
    }
}
