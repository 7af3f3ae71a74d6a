//! One call to the fleet's internal API, as [`FleetClient`] sends it: its
//! URL, deadline and token, retries with backoff on what may succeed later
//! (only when the request surely never left, for a call that must not be
//! repeated), and the error of a non-2xx answer.

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::Serialize;

use super::client::FleetClient;
use super::error::PushError;

/// One request to send, possibly several times.
pub(super) struct Call<'a, B: Serialize> {
    pub(super) op: &'static str,
    pub(super) method: Method,
    pub(super) url: Url,
    pub(super) body: Option<&'a B>,
    pub(super) timeout: Duration,
    /// Retry only when the request surely never left.
    pub(super) only_unsent: bool,
}

impl FleetClient {
    pub(super) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.extend(segments);
        }
        url
    }

    pub(super) fn post<'a, B: Serialize>(&self, op: &'static str, body: &'a B) -> Call<'a, B> {
        Call {
            op,
            method: Method::POST,
            url: self.url(&["internal", op]),
            body: Some(body),
            timeout: self.config.timeout,
            only_unsent: false,
        }
    }

    /// Sends `call`, retrying what may succeed later; returns the JSON body
    /// (`Null` when there is none).
    pub(super) async fn send<B: Serialize>(
        &self,
        call: Call<'_, B>,
    ) -> Result<serde_json::Value, PushError> {
        let attempts = self.config.attempts.max(1);
        let mut attempt = 0;
        loop {
            let result = self.send_once(&call).await;
            let outcome = if result.is_ok() { "ok" } else { "error" };
            metrics::counter!("prefix_router_push_http_requests_total", "op" => call.op, "outcome" => outcome)
                .increment(1);
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            attempt += 1;
            let retry = if call.only_unsent {
                err.not_sent()
            } else {
                err.is_retryable()
            };
            if !retry || attempt >= attempts {
                return Err(err);
            }
            tracing::debug!(op = call.op, attempt, error = %err, "fleet call failed; retrying");
            tokio::time::sleep(self.config.backoff.delay(attempt - 1)).await;
        }
    }

    async fn send_once<B: Serialize>(
        &self,
        call: &Call<'_, B>,
    ) -> Result<serde_json::Value, PushError> {
        let mut req = self
            .http
            .request(call.method.clone(), call.url.clone())
            .timeout(call.timeout);
        if let Some(token) = &self.config.token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = call.body {
            req = req.json(body);
        }
        let transport = |source: reqwest::Error| PushError::Transport {
            op: call.op,
            url: call.url.to_string(),
            not_sent: source.is_connect(),
            source,
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(transport)?;
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        if status.is_success() {
            return Ok(json);
        }
        Err(status_error(call.op, &call.url, status, &json, &bytes))
    }
}

/// The error of a non-2xx answer, with the fleet's `{"error": {...}}` body.
fn status_error(
    op: &'static str,
    url: &Url,
    status: StatusCode,
    json: &serde_json::Value,
    raw: &[u8],
) -> PushError {
    let error = &json["error"];
    let kind = error["type"].as_str().unwrap_or("-").to_owned();
    let message = match error["message"].as_str() {
        Some(m) => m.to_owned(),
        None => String::from_utf8_lossy(&raw[..raw.len().min(200)]).into_owned(),
    };
    PushError::Status {
        op,
        url: url.to_string(),
        status: status.as_u16(),
        kind,
        message,
    }
}
