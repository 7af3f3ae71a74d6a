//! [`PushError`]: why a call to the fleet's internal API failed, with enough
//! context (operation, URL, status, the fleet's own message) to act on it.

use thiserror::Error;

/// A failed call to the fleet's `/internal/*` API.
#[derive(Debug, Error)]
pub enum PushError {
    /// The base URL cannot be used (not `http://`, or unparsable).
    #[error("invalid fleet URL {url:?}: {detail}")]
    InvalidUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The HTTP client could not be built.
    #[error("building the fleet HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// No answer: connection refused or reset, timeout, DNS. The fleet (or
    /// the balancer in front of it) is unreachable for now.
    #[error("{op} {url}: fleet unreachable: {source}")]
    Transport {
        /// The operation, e.g. `stored`.
        op: &'static str,
        /// The URL called.
        url: String,
        /// Whether the request surely never reached the server (connect
        /// error), which makes even a non-idempotent call safe to retry.
        not_sent: bool,
        /// The client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The fleet answered with an error status.
    #[error("{op} {url}: HTTP {status} {kind}: {message}")]
    Status {
        /// The operation.
        op: &'static str,
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The error `type` of the fleet's JSON body (e.g. `unknown_worker`),
        /// or `-` when the body had none.
        kind: String,
        /// The error message of the body, or the body itself (truncated).
        message: String,
    },
    /// A success status with a body that does not say what it should.
    #[error("{op} {url}: unexpected reply: {detail}")]
    Reply {
        /// The operation.
        op: &'static str,
        /// The URL called.
        url: String,
        /// What was wrong.
        detail: String,
    },
}

impl PushError {
    /// Whether trying again later may succeed: transport errors, 5xx, 408
    /// and 429. Other 4xx mean the request itself is wrong and are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            PushError::Transport { .. } => true,
            PushError::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            PushError::InvalidUrl { .. } | PushError::Client(_) | PushError::Reply { .. } => false,
        }
    }

    /// Whether the fleet does not know this worker (its lease expired, it was
    /// drained, or the state was lost): the worker must heartbeat to register
    /// again and then send a full snapshot.
    pub fn is_unknown_worker(&self) -> bool {
        matches!(self, PushError::Status { status: 404, kind, .. } if kind == "unknown_worker")
    }

    /// The HTTP status, when the fleet answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            PushError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether the request surely never reached the fleet.
    pub fn not_sent(&self) -> bool {
        matches!(self, PushError::Transport { not_sent: true, .. })
    }
}
