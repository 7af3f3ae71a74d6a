//! Which requests the response cache may answer, and the key of each: a
//! SHA-256 over the path, the model, the tenant, `cache_salt` and the body
//! in canonical JSON (object keys sorted at every depth, no whitespace,
//! numbers by value), so that neither key order nor formatting makes two
//! requests differ.

use std::collections::BTreeMap;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::request::Request;

/// Tells keys of another layout apart (bump when the key's inputs change).
const KEY_VERSION: &[u8] = b"prefix-router response cache v1";

/// An eligible request's cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey {
    /// The model whose cache (and budget) holds the entry: the body's
    /// `model`, which the caller may replace by an adapter's base model.
    pub model: String,
    /// The key, 64 lower-case hex digits.
    pub hex: String,
}

/// Why a request is not answered from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ineligible {
    /// No valid `model`.
    #[error("no valid model")]
    NoModel,
    /// Neither `temperature` 0 nor a `seed`: the engine samples anew.
    #[error("neither temperature 0 nor a seed")]
    NotDeterministic,
    /// `n` other than 1: several choices in one answer.
    #[error("n is not 1")]
    SeveralChoices,
    /// A number too large to be told apart from its neighbours once read
    /// (beyond 2^53): two different requests could share a key.
    #[error("a number beyond 2^53")]
    InexactNumber,
}

/// The key of a request to `path` (with its query) whose `Authorization`
/// header is `authorization` (the tenant; hashed, never kept), or why it
/// may not be cached. Deterministic means: `temperature` 0, or an integer
/// `seed`; and `n` absent, null or 1.
pub fn request_key(
    path: &str,
    authorization: Option<&[u8]>,
    request: &Request,
) -> Result<RequestKey, Ineligible> {
    let fields = request.fields();
    let model = match &fields.model {
        Value::String(m) if protocol::check_name("model", m).is_ok() => m.clone(),
        _ => return Err(Ineligible::NoModel),
    };
    let greedy = fields.temperature.as_f64() == Some(0.0);
    let seeded = fields.seed.is_i64() || fields.seed.is_u64();
    if !greedy && !seeded {
        return Err(Ineligible::NotDeterministic);
    }
    match &fields.n {
        Value::Null => {}
        n if n.as_u64() == Some(1) => {}
        _ => return Err(Ineligible::SeveralChoices),
    }
    // The tenant: a digest of the credential, so that two API keys never
    // share an entry; no header is the anonymous tenant.
    let tenant: Vec<u8> = authorization
        .map(|a| Sha256::digest(a).to_vec())
        .unwrap_or_default();
    let salt = fields.cache_salt.as_str().unwrap_or_default().as_bytes();
    // The body's entries by key (a repeated key's last value), each
    // written canonically: the object's canonical form.
    let entries: BTreeMap<&str, &str> = request.entries().collect();
    let mut canonical_body = Vec::with_capacity(request.len());
    canonical_body.push(b'{');
    for (i, (key, raw)) in entries.into_iter().enumerate() {
        let value: Value = serde_json::from_str(raw).map_err(|_| Ineligible::InexactNumber)?;
        if has_inexact_number(&value) {
            return Err(Ineligible::InexactNumber);
        }
        if i > 0 {
            canonical_body.push(b',');
        }
        write_string(key, &mut canonical_body);
        canonical_body.push(b':');
        write_canonical(&value, &mut canonical_body);
    }
    canonical_body.push(b'}');
    let mut hasher = Sha256::new();
    for part in [
        KEY_VERSION,
        path.as_bytes(),
        model.as_bytes(),
        &tenant,
        salt,
        &canonical_body,
    ] {
        // Length-prefixed: no two sequences of parts hash alike.
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(RequestKey { model, hex })
}

/// Appends `value` as canonical JSON: object keys sorted by their bytes at
/// every depth, no whitespace, strings escaped as serde_json does, integral
/// numbers as integers (`0.0` as `0`), other numbers as serde_json writes
/// them.
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(k, out);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        Value::String(s) => write_string(s, out),
        Value::Number(n) => write_number(n, out),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Null => out.extend_from_slice(b"null"),
    }
}

/// Whether `value` holds a number read as a float at or beyond 2^53, where
/// distinct integers (beyond u64 too) read as the same float.
fn has_inexact_number(value: &Value) -> bool {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    match value {
        Value::Number(n) => n.is_f64() && n.as_f64().is_none_or(|f| f.abs() >= EXACT),
        Value::Array(items) => items.iter().any(has_inexact_number),
        Value::Object(map) => map.values().any(has_inexact_number),
        _ => false,
    }
}

/// A number by its value: an integral float (`0.0`, `8.0`) is written as
/// the integer it equals, as the engine's request models read it.
fn write_number(n: &serde_json::Number, out: &mut Vec<u8>) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    match n.as_f64() {
        Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < EXACT => {
            out.extend_from_slice((f as i64).to_string().as_bytes());
        }
        _ => out.extend_from_slice(n.to_string().as_bytes()),
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    // Serializing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(body: &str) -> Request {
        Request::parse(bytes::Bytes::from(body.to_owned())).unwrap()
    }

    fn key(body: &str) -> Result<RequestKey, Ineligible> {
        request_key("/v1/completions", None, &parsed(body))
    }

    #[test]
    fn numbers_beyond_exact_floats_are_not_keyed() {
        for big in ["18446744073709551616", "18446744073709551617", "1e300"] {
            let body = format!(
                r#"{{"model":"m","temperature":0,"prompt":"hi","logit_bias":{{"1":{big}}}}}"#
            );
            assert_eq!(key(&body), Err(Ineligible::InexactNumber), "{big}");
        }
        // u64 and ordinary floats are exact enough.
        assert!(
            key(r#"{"model":"m","seed":18446744073709551615,"prompt":"hi","top_p":0.9}"#).is_ok()
        );
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a =
            key(r#"{"model":"m","temperature":0,"prompt":"hi","x":{"b":1,"a":[1,{"d":2,"c":3}]}}"#);
        let b = key(r#"{ "x": {"a": [1, {"c": 3, "d": 2}], "b": 1},
                 "prompt": "hi", "temperature": 0, "model": "m" }"#);
        assert_eq!(a.unwrap(), b.unwrap());
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let v: Value =
            serde_json::from_str(r#"{"b":[{"z":1.0,"y":"é\n"}],"a":null,"c":[-0.0,0.5,1e2]}"#)
                .unwrap();
        let mut out = Vec::new();
        write_canonical(&v, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":null,"b":[{"y":"é\n","z":1}],"c":[0,0.5,100]}"#
        );
    }

    #[test]
    fn everything_that_changes_the_answer_changes_the_key() {
        let base = r#"{"model":"m","temperature":0,"prompt":"hi"}"#;
        let k = key(base).unwrap();
        for other in [
            r#"{"model":"m","temperature":0,"prompt":"ho"}"#,
            r#"{"model":"m2","temperature":0,"prompt":"hi"}"#,
            r#"{"model":"m","temperature":0,"prompt":"hi","stream":true}"#,
            r#"{"model":"m","temperature":0,"prompt":"hi","cache_salt":"s"}"#,
            r#"{"model":"m","temperature":0,"prompt":"hi","logprobs":1}"#,
        ] {
            assert_ne!(key(other).unwrap().hex, k.hex, "{other}");
        }
        let chat = request_key("/v1/chat/completions", None, &parsed(base)).unwrap();
        assert_ne!(chat.hex, k.hex);
        let a = request_key("/v1/completions", Some(b"Bearer a"), &parsed(base)).unwrap();
        let b = request_key("/v1/completions", Some(b"Bearer b"), &parsed(base)).unwrap();
        assert_ne!(a.hex, b.hex);
        assert_ne!(a.hex, k.hex);
        assert_eq!(k.hex.len(), 64);
        assert_eq!(k.model, "m");
    }

    #[test]
    fn only_deterministic_single_choice_requests_are_eligible() {
        assert!(key(r#"{"model":"m","temperature":0.0}"#).is_ok());
        assert!(key(r#"{"model":"m","temperature":0.7,"seed":42}"#).is_ok());
        assert!(key(r#"{"model":"m","seed":7,"n":1}"#).is_ok());
        let not = |b: &str| key(b).unwrap_err();
        assert_eq!(not(r#"{"model":"m"}"#), Ineligible::NotDeterministic);
        assert_eq!(
            not(r#"{"model":"m","temperature":0.7}"#),
            Ineligible::NotDeterministic
        );
        assert_eq!(
            not(r#"{"model":"m","temperature":0.7,"seed":null}"#),
            Ineligible::NotDeterministic
        );
        assert_eq!(
            not(r#"{"model":"m","temperature":"0"}"#),
            Ineligible::NotDeterministic
        );
        assert_eq!(
            not(r#"{"model":"m","temperature":0,"n":2}"#),
            Ineligible::SeveralChoices
        );
        assert_eq!(not(r#"{"temperature":0}"#), Ineligible::NoModel);
        assert_eq!(
            not(r#"{"model":"a b","temperature":0}"#),
            Ineligible::NoModel
        );
    }
}
