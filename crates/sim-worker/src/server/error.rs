//! [`SimError`]: an error answer in vLLM's JSON shape
//! (`{"error": {"message", "type", "code"}}`), and [`SimJson`], a JSON body
//! extractor whose rejections are such answers.

use axum::Json;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

/// An HTTP error answer of the simulated engine.
#[derive(Debug)]
pub struct SimError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl SimError {
    /// A 400 for a request the engine cannot accept.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// Any status with its kind and message.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        SimError {
            status,
            kind,
            message: message.into(),
        }
    }
}

impl IntoResponse for SimError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": { "message": self.message, "type": self.kind, "code": self.status.as_u16() }
        });
        (self.status, Json(body)).into_response()
    }
}

/// Like `axum::Json`, but malformed bodies are [`SimError`]s, and any
/// content type is accepted.
pub struct SimJson<T>(pub T);

impl<S, T> FromRequest<S> for SimJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = SimError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| SimError::new(e.status(), "invalid_request", e.body_text()))?;
        serde_json::from_slice(&bytes)
            .map(SimJson)
            .map_err(|e| SimError::bad_request(format!("invalid JSON body: {e}")))
    }
}
