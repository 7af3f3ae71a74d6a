//! The admission step of the request pipeline, after the body is parsed
//! and before anything is routed (`crate::admission`), and the priority
//! handed on to the engine when configured.

use axum::http::HeaderMap;

use super::{Endpoint, Parsed};
use crate::admission::{Admission, Admitted, Cost};
use crate::proxy::ProxyError;
use crate::request::Request;

/// Bytes per token when a prompt's tokens are not counted (no tokenizer):
/// a rough estimate, corrected by the answer's usage.
const BYTES_PER_TOKEN: u64 = 4;

/// Classifies the request and admits it against its tenant's limits; a
/// refusal is [`ProxyError::Limited`].
pub async fn admit(
    admission: &Admission,
    headers: &HeaderMap,
    parsed: &Parsed,
) -> Result<Admitted, ProxyError> {
    admission
        .admit(headers, user(parsed), cost(parsed))
        .await
        .map_err(|r| ProxyError::Limited(Box::new(r)))
}

/// The admission decision [`admit`] would make, without changing anything
/// (explain).
pub async fn explain_admission(
    admission: &Admission,
    headers: &HeaderMap,
    parsed: &Parsed,
) -> serde_json::Value {
    admission.explain(headers, user(parsed), cost(parsed)).await
}

/// Sets the request's priority as vLLM's `priority` field on the body it
/// hands on (the client's own replaced), when `--pass-priority` asks for
/// it. Both modes hand it on (`serve` forwards it, the picker sends it
/// back to the gateway as the body's replacement).
pub fn with_priority(
    admission: &Admission,
    endpoint: Endpoint,
    admitted: &Admitted,
    request: &mut Request,
) {
    if !admission.config().pass_priority || endpoint == Endpoint::Other {
        return;
    }
    // vLLM serves a lower value first; a class's priority is higher for
    // more important work.
    request.set(
        "priority",
        serde_json::Value::from(-i64::from(admitted.class.priority)),
    );
}

/// The body's `user`, when a string (a possible tenant source).
fn user(parsed: &Parsed) -> Option<&str> {
    parsed.request.fields().user.as_str()
}

/// What a request costs its tenant's tokens limit.
fn cost(parsed: &Parsed) -> Cost {
    let prompt_tokens = match parsed.chain.prompt_tokens {
        0 => parsed.request.len() as u64 / BYTES_PER_TOKEN,
        n => n,
    };
    Cost {
        prompt_tokens,
        max_tokens: parsed.request.fields().max_tokens(),
    }
}
