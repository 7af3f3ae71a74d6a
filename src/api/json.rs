//! [`JsonBody`]: a JSON request body whose every rejection is a JSON 4xx.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use super::ApiError;

/// Like `axum::Json`, but errors (too large, malformed, wrong types, too
/// deep: serde_json stops at 128 levels) are [`ApiError`]s, and any
/// content type is accepted, as workers' HTTP clients vary.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rej| {
            let status = rej.status();
            ApiError::new(status, "invalid_body", rej.body_text())
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}
