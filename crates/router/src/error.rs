//! [`ApiError`]: every error the router answers over HTTP, as a JSON body
//! (the API's handlers, the endpoint picker, the refusals of admission and
//! flow control).

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use state::StateError;

/// An HTTP error with a JSON body `{"error": {"message", "type", "code"}}`.
#[derive(Debug)]
pub struct ApiError {
    /// The status code.
    pub status: StatusCode,
    /// A short machine-readable kind, e.g. `invalid_request`.
    pub kind: &'static str,
    /// What went wrong, for a human.
    pub message: String,
    /// The body's `code`: this name (OpenAI's, e.g. `rate_limit_exceeded`),
    /// else the status as a number.
    pub code: Option<&'static str>,
    /// Headers sent with the error (a refusal's `Retry-After`, rate
    /// limits); boxed to keep the error small.
    pub headers: Option<Box<HeaderMap>>,
}

impl ApiError {
    /// A 400 for a request the API cannot accept.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// Any status with its kind and message.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
            code: None,
            headers: None,
        }
    }

    /// The JSON body: `{"error": {"message", "type", "code"}}`.
    pub fn body(&self) -> serde_json::Value {
        let code = match self.code {
            Some(name) => json!(name),
            None => json!(self.status.as_u16()),
        };
        json!({ "error": { "message": self.message, "type": self.kind, "code": code } })
    }
}

impl From<StateError> for ApiError {
    fn from(e: StateError) -> Self {
        let (status, kind) = match &e {
            StateError::Unavailable(_) | StateError::Timeout(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "state_unavailable")
            }
            StateError::UnknownWorker { .. } => (StatusCode::NOT_FOUND, "unknown_worker"),
            StateError::UrlConflict { .. } => (StatusCode::CONFLICT, "worker_url_conflict"),
            StateError::SyncAborted { .. } => (StatusCode::CONFLICT, "sync_aborted"),
            StateError::TooManyModels { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_models"),
            StateError::Invalid { what, .. } if what.ends_with("hashes") => {
                (StatusCode::PAYLOAD_TOO_LARGE, "too_many_hashes")
            }
            StateError::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid_request"),
            StateError::Script { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "state_error"),
        };
        if status.is_server_error() {
            tracing::warn!(error = %e, "state operation failed");
        }
        ApiError::new(status, kind, e.to_string())
    }
}

impl From<protocol::InvalidName> for ApiError {
    fn from(e: protocol::InvalidName) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

impl From<tokenize::InvalidPrompt> for ApiError {
    fn from(e: tokenize::InvalidPrompt) -> Self {
        ApiError::bad_request(e.0)
    }
}

impl IntoResponse for ApiError {
    /// The JSON body. A 408 (a client too slow to send its request) also
    /// closes the connection: the rest of the body may still be on its way,
    /// and the client has shown it cannot be waited for.
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(headers) = self.headers {
            response.headers_mut().extend(*headers);
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
