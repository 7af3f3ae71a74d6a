//! The admission step of the request pipeline, after the body is parsed
//! and before anything is routed (`crate::admission`), and the priority
//! handed on to the engine when configured.

use axum::http::HeaderMap;
use bytes::Bytes;

use super::{Endpoint, Parsed};
use crate::admission::{Admission, Admitted, Cost};
use crate::proxy::ProxyError;

/// Bytes per token when a prompt's tokens are not counted (no tokenizer):
/// a rough estimate, corrected by the answer's usage.
const BYTES_PER_TOKEN: u64 = 4;

/// Classifies the request and admits it against its tenant's limits; a
/// refusal is [`ProxyError::Limited`].
pub async fn admit(
    admission: &Admission,
    headers: &HeaderMap,
    parsed: &Parsed,
    body: &Bytes,
) -> Result<Admitted, ProxyError> {
    admission
        .admit(headers, parsed.user.as_deref(), cost(parsed, body))
        .await
        .map_err(|r| ProxyError::Limited(Box::new(r)))
}

/// The admission decision [`admit`] would make, without changing anything
/// (explain).
pub async fn explain_admission(
    admission: &Admission,
    headers: &HeaderMap,
    parsed: &Parsed,
    body: &Bytes,
) -> serde_json::Value {
    admission
        .explain(headers, parsed.user.as_deref(), cost(parsed, body))
        .await
}

/// `body` with the request's priority as vLLM's `priority` field (the
/// client's own replaced), when `--pass-priority` asks for it; `None`: the
/// body goes on as it is. Both modes hand it on (`serve` forwards it, the
/// picker sends it back to the gateway as the body's replacement).
pub fn with_priority(
    admission: &Admission,
    endpoint: Endpoint,
    admitted: &Admitted,
    body: &Bytes,
) -> Option<Bytes> {
    if !admission.config().pass_priority || endpoint == Endpoint::Other {
        return None;
    }
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_slice(body) else {
        return None;
    };
    // vLLM serves a lower value first; a class's priority is higher for
    // more important work.
    fields.insert(
        "priority".into(),
        serde_json::Value::from(-i64::from(admitted.class.priority)),
    );
    serde_json::to_vec(&fields).ok().map(Bytes::from)
}

/// What a request costs its tenant's tokens limit.
fn cost(parsed: &Parsed, body: &Bytes) -> Cost {
    let prompt_tokens = match parsed.chain.prompt_tokens {
        0 => body.len() as u64 / BYTES_PER_TOKEN,
        n => n,
    };
    Cost {
        prompt_tokens,
        max_tokens: parsed.max_tokens,
    }
}
