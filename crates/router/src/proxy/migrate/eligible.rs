//! Which requests can be continued exactly on another worker, read from
//! the request as parsed once (`crate::request`), on the tokenizing pool,
//! when migration is on.
//!
//! A completion or chat request, streamed or not, is migratable unless one
//! of its fields makes the continuation inexact (the list is in
//! `docs/migration.md`): more than one answer (`n`, `best_of`, beam
//! search), constrained decoding (`response_format` other than text,
//! `guided_*`, `structured_outputs`), tools, `logprobs`,
//! `prompt_logprobs`, stop strings, `echo`, `suffix`, and the penalties
//! that count the output only (`presence_penalty`, `frequency_penalty`:
//! on the next worker the output so far is prompt, so it would no longer
//! be penalized; `repetition_penalty` counts prompt and output alike and
//! moves). A non-streamed one is asked of its workers as a stream and
//! answered whole (`assemble`).

use serde_json::Value;

use super::super::Endpoint;
use crate::request::Request;

/// What the relay needs to know about a migratable request.
#[derive(Debug, Clone)]
pub(in crate::proxy) struct Eligible {
    /// The client asked for a stream (else the router streams from the
    /// worker and answers with one JSON object).
    pub(super) streamed: bool,
    /// A chat request (continued through `/v1/completions`, its chunks
    /// reshaped as chat chunks).
    pub(super) chat: bool,
    /// The client asked for `return_token_ids` itself.
    pub(super) client_ids: bool,
    /// The `model` the client named (an adapter keeps its name).
    pub(super) model: String,
    /// Its `cache_salt`.
    pub(super) salt: Option<String>,
    /// `max_tokens` (chat: `max_completion_tokens` first), when given.
    pub(super) max_tokens: Option<u64>,
}

/// Whether `request` to `endpoint` can be migrated; `Err` names why not.
/// It reads the request's typed fields (`crate::request::Fields`).
pub(in crate::proxy) fn eligibility(
    endpoint: Endpoint,
    request: &Request,
) -> Result<Eligible, &'static str> {
    let chat = match endpoint {
        Endpoint::Completions => false,
        Endpoint::ChatCompletions => true,
        Endpoint::Other => return Err("not a completion"),
    };
    let f = request.fields();
    let present = &f.present;
    let more_than_one = |v: &Value| v.as_u64().is_some_and(|n| n > 1);
    let truthy = |v: &Value| !matches!(v, Value::Null | Value::Bool(false));
    let nonzero = |v: &Value| !v.is_null() && v.as_f64() != Some(0.0);
    let streamed = f.streamed();
    let why = if !streamed && present.stream_options {
        // vLLM refuses it: the worker is to say so.
        Some("stream_options without stream")
    } else if more_than_one(&f.n) || more_than_one(&f.best_of) || f.use_beam_search == true {
        Some("several answers (n, best_of or beam search)")
    } else if !(f.response_format.is_null() || f.response_format["type"] == "text")
        || present.constrained()
    {
        Some("constrained decoding (response_format, guided_*, structured_outputs)")
    } else if present.tools || present.functions {
        Some("tools")
    } else if truthy(&f.logprobs) || !f.prompt_logprobs.is_null() {
        Some("logprobs")
    } else if match &f.stop {
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    } {
        Some("stop strings")
    } else if f.echo == true || present.suffix {
        Some("echo or suffix")
    } else if nonzero(&f.presence_penalty) || nonzero(&f.frequency_penalty) {
        Some("output-token penalties (presence_penalty, frequency_penalty)")
    } else {
        None
    };
    if let Some(why) = why {
        return Err(why);
    }
    let max = if chat {
        f.max_completion_tokens.as_u64().or(f.max_tokens.as_u64())
    } else {
        f.max_tokens.as_u64()
    };
    Ok(Eligible {
        streamed,
        chat,
        client_ids: f.return_token_ids == true,
        model: f.model.as_str().unwrap_or_default().to_owned(),
        salt: tokenize::cache_salt(&f.cache_salt),
        max_tokens: max,
    })
}

/// `body` with `return_token_ids` set (the last key wins in vLLM's
/// parser, so a client's `false` is overridden), unless the client asked
/// for them already.
pub(in crate::proxy) fn asking_for_ids(e: &Eligible, body: &bytes::Bytes) -> bytes::Bytes {
    if e.client_ids {
        return body.clone();
    }
    let trimmed = body.trim_ascii_end();
    let Some(inner) = trimmed.strip_suffix(b"}") else {
        return body.clone();
    };
    let empty = inner.trim_ascii() == b"{";
    let mut out = Vec::with_capacity(body.len() + 26);
    out.extend_from_slice(inner);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(br#""return_token_ids":true}"#);
    bytes::Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: &Value) -> Request {
        Request::parse(bytes::Bytes::from(body.to_string())).unwrap()
    }

    fn check(body: Value) -> Result<Eligible, &'static str> {
        eligibility(Endpoint::Completions, &request(&body))
    }

    #[test]
    fn inexact_continuations_are_named() {
        let ok = json!({"model": "m", "prompt": "p", "stream": true, "max_tokens": 9, "stop_token_ids": [2]});
        let e = check(ok.clone()).unwrap();
        assert_eq!(
            (e.max_tokens, e.client_ids, e.chat),
            (Some(9), false, false)
        );
        let mut whole = ok.clone();
        whole["stream"] = json!(false);
        assert!(!check(whole.clone()).unwrap().streamed);
        whole["stream_options"] = json!({"include_usage": true});
        assert!(check(whole).is_err());
        for (field, value) in [
            ("n", json!(2)),
            ("response_format", json!({"type": "json_object"})),
            ("guided_regex", json!("a+")),
            ("tools", json!([])),
            ("logprobs", json!(1)),
            ("stop", json!(["\n"])),
            ("echo", json!(true)),
            ("presence_penalty", json!(1.5)),
            ("frequency_penalty", json!(-0.5)),
        ] {
            let mut body = ok.clone();
            body[field] = value;
            assert!(check(body).is_err(), "{field}");
        }
        let mut fine = ok.clone();
        fine["response_format"] = json!({"type": "text"});
        fine["logprobs"] = Value::Null;
        fine["stop"] = json!([]);
        fine["presence_penalty"] = json!(0);
        fine["frequency_penalty"] = json!(0.0);
        fine["repetition_penalty"] = json!(1.5);
        assert!(check(fine).is_ok());
        assert!(eligibility(Endpoint::Other, &request(&json!({}))).is_err());
    }

    #[test]
    fn ids_are_asked_for_once() {
        let e = check(json!({"model": "m", "prompt": "p", "stream": true})).unwrap();
        let body = bytes::Bytes::from_static(br#"{"model":"m","return_token_ids":false} "#);
        let asked: Value = serde_json::from_slice(&asking_for_ids(&e, &body)).unwrap();
        assert_eq!(asked["return_token_ids"], json!(true));
    }
}
