//! [`Refusal`]: why flow control did not serve a request, and what the
//! client is told: a 503 (or a 429 for a sheddable request) with
//! `Retry-After` and an OpenAI-shaped error body.

use axum::http::StatusCode;

/// Why a request left the waiting room without being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShedReason {
    /// Sheddable (negative priority) while the workers are saturated.
    Sheddable,
    /// The router's waiting room was full and this request's priority was
    /// the lowest (or, at equal priority, its tenant the furthest ahead).
    QueueFull,
    /// It waited its priority's longest wait.
    QueueTimeout,
}

impl ShedReason {
    /// Its metric label and error code.
    pub fn code(self) -> &'static str {
        match self {
            ShedReason::Sheddable => "sheddable_refused",
            ShedReason::QueueFull => "queue_full",
            ShedReason::QueueTimeout => "queue_timeout",
        }
    }
}

/// A request flow control refused or shed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// Why.
    pub reason: ShedReason,
    /// For the client.
    pub message: String,
    /// Seconds the client should wait before trying again.
    pub retry_after: u64,
}

impl Refusal {
    /// The refusal for `reason`.
    pub fn new(reason: ShedReason, retry_after: u64) -> Refusal {
        let message = match reason {
            ShedReason::Sheddable => {
                "the model's workers are saturated and this request's priority is sheddable; try again later"
            }
            ShedReason::QueueFull => {
                "the model's workers are saturated and the router's waiting room is full; try again later"
            }
            ShedReason::QueueTimeout => {
                "the model's workers stayed saturated for the longest wait of this request's priority; try again later"
            }
        };
        Refusal {
            reason,
            message: message.to_owned(),
            retry_after: retry_after.max(1),
        }
    }

    /// 429 for a sheddable request (back off), 503 otherwise (the fleet is
    /// overloaded).
    pub fn status(&self) -> StatusCode {
        match self.reason {
            ShedReason::Sheddable => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl From<Refusal> for crate::error::ApiError {
    /// The response: its status, `Retry-After`, and the error body with the
    /// reason as its type.
    fn from(r: Refusal) -> Self {
        let mut e = crate::error::ApiError::new(r.status(), r.reason.code(), r.message.clone());
        e.code = Some(r.reason.code());
        e.headers.get_or_insert_with(Box::default).insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(r.retry_after),
        );
        e
    }
}
