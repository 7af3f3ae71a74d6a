//! What a tenant's rate limits stand at ([`RateState`]), as OpenAI's
//! `x-ratelimit-*` headers, and a refusal ([`Refusal`]) as the 429 OpenAI
//! answers: those headers, `Retry-After` and a `rate_limit_exceeded` body.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use state::LimitReason;

use crate::error::ApiError;

/// One limit's standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The limit per window.
    pub limit: u64,
    /// What may still be used at the full rate in the current window.
    pub remaining: u64,
    /// Until the limit is whole again.
    pub reset: Duration,
}

impl Window {
    /// The standing of a limit of `limit` per `window` whose arrival time
    /// is `debt` ahead of now.
    pub fn new(limit: u64, window: Duration, debt: Duration) -> Window {
        let per = window.as_secs_f64() / limit.max(1) as f64;
        let used = (debt.as_secs_f64() / per).ceil() as u64;
        Window {
            limit,
            remaining: limit.saturating_sub(used),
            reset: debt,
        }
    }
}

/// A tenant's rate limits after an admission decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateState {
    /// Requests per window, when limited.
    pub requests: Option<Window>,
    /// Tokens per window, when limited.
    pub tokens: Option<Window>,
}

impl RateState {
    /// OpenAI's headers for the limits that apply.
    pub fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (kind, w) in [("requests", self.requests), ("tokens", self.tokens)] {
            let Some(w) = w else { continue };
            put(
                &mut h,
                &format!("x-ratelimit-limit-{kind}"),
                w.limit.to_string(),
            );
            put(
                &mut h,
                &format!("x-ratelimit-remaining-{kind}"),
                w.remaining.to_string(),
            );
            put(
                &mut h,
                &format!("x-ratelimit-reset-{kind}"),
                duration_text(w.reset),
            );
        }
        h
    }
}

/// A request refused by a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The limit that refused it.
    pub reason: LimitReason,
    /// The tenant's limits at that moment.
    pub state: RateState,
    /// When a retry may pass.
    pub retry_after: Duration,
    /// What to tell the client.
    pub message: String,
}

impl Refusal {
    /// The 429: OpenAI's body, `Retry-After` in whole seconds (at least 1)
    /// and the rate limit headers.
    pub fn into_error(self) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_exceeded",
            self.message,
        );
        e.code = Some("rate_limit_exceeded");
        let mut headers = self.state.headers();
        let secs = self.retry_after.as_secs_f64().ceil().max(1.0) as u64;
        put(&mut headers, "retry-after", secs.to_string());
        put(
            &mut headers,
            "x-ratelimit-reason",
            self.reason.as_str().to_owned(),
        );
        e.headers = Some(Box::new(headers));
        e
    }
}

fn put(h: &mut HeaderMap, name: &str, value: String) {
    if let (Ok(n), Ok(v)) = (
        HeaderName::try_from(name),
        HeaderValue::try_from(value.as_str()),
    ) {
        h.insert(n, v);
    }
}

/// A duration as OpenAI writes resets: `250ms`, `1.5s`, `6m0s`.
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (m, s) = (ms / 60_000, (ms % 60_000) as f64 / 1000.0);
    let s = format!("{s:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if m == 0 {
        format!("{s}s")
    } else {
        format!("{m}m{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_openai_writes_them() {
        assert_eq!(duration_text(Duration::from_millis(20)), "20ms");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration_text(Duration::from_secs(1)), "1s");
        assert_eq!(duration_text(Duration::from_secs(360)), "6m0s");
        assert_eq!(duration_text(Duration::from_millis(61_250)), "1m1.25s");
    }

    #[test]
    fn windows() {
        let minute = Duration::from_secs(60);
        let w = Window::new(120, minute, Duration::ZERO);
        assert_eq!((w.remaining, w.reset), (120, Duration::ZERO));
        // 10 requests ahead: 5 s of arrival time at 2 per second.
        let w = Window::new(120, minute, Duration::from_secs(5));
        assert_eq!(w.remaining, 110);
        let w = Window::new(120, minute, Duration::from_secs(90));
        assert_eq!(w.remaining, 0);
    }

    #[test]
    fn a_refusal_is_openais_429() {
        let state = RateState {
            requests: Some(Window::new(
                120,
                Duration::from_secs(60),
                Duration::from_secs(61),
            )),
            tokens: None,
        };
        let e = Refusal {
            reason: LimitReason::Requests,
            state,
            retry_after: Duration::from_millis(300),
            message: "slow down".into(),
        }
        .into_error();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.body()["error"]["code"], "rate_limit_exceeded");
        assert_eq!(e.body()["error"]["type"], "rate_limit_exceeded");
        let h = e.headers.unwrap();
        assert_eq!(h["retry-after"], "1");
        assert_eq!(h["x-ratelimit-limit-requests"], "120");
        assert_eq!(h["x-ratelimit-remaining-requests"], "0");
        assert_eq!(h["x-ratelimit-reset-requests"], "1m1s");
        assert!(h.get("x-ratelimit-limit-tokens").is_none());
    }
}
