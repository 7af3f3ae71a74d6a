//! The prompt of an OpenAI request, as token ids: what the engine will
//! hash into prefix-cache blocks.

use serde_json::Value;

/// A `prompt` field that is not one of the accepted shapes (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidPrompt(pub String);

/// A completions prompt as the client sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum CompletionPrompt {
    /// Text, tokenized by the router exactly as the engine does.
    Text(String),
    /// Token ids, used as given.
    Tokens(Vec<u32>),
}

/// The prompt of a `/v1/completions` body: a string, a list of strings,
/// token ids, or a list of token-id lists. A batch goes to one worker, so
/// its first prompt decides the route.
pub fn completion_prompt(body: &Value) -> Result<CompletionPrompt, InvalidPrompt> {
    let invalid = |m: &str| InvalidPrompt(format!("prompt {m}"));
    match body.get("prompt") {
        None | Some(Value::Null) => Err(invalid("is required")),
        Some(Value::String(s)) => Ok(CompletionPrompt::Text(s.clone())),
        Some(Value::Array(items)) => match items.first() {
            None => Err(invalid("must not be empty")),
            Some(Value::String(s)) => Ok(CompletionPrompt::Text(s.clone())),
            Some(Value::Number(_)) => token_ids(items).map(CompletionPrompt::Tokens),
            Some(Value::Array(inner)) => token_ids(inner).map(CompletionPrompt::Tokens),
            Some(_) => Err(invalid("must be a string, a list of strings, or token ids")),
        },
        Some(_) => Err(invalid("must be a string, a list of strings, or token ids")),
    }
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>, InvalidPrompt> {
    items
        .iter()
        .map(|v| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    InvalidPrompt(format!("token id {v} is not an unsigned 32-bit integer"))
                })
        })
        .collect()
}

/// `cache_salt` of the request, which vLLM mixes into the first block.
pub fn cache_salt(body: &Value) -> Option<String> {
    body.get("cache_salt")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_prompt_shape_vllm_accepts() {
        let p = |v: Value| completion_prompt(&json!({ "prompt": v }));
        assert_eq!(p(json!("hi")).unwrap(), CompletionPrompt::Text("hi".into()));
        assert_eq!(
            p(json!(["a", "b"])).unwrap(),
            CompletionPrompt::Text("a".into())
        );
        assert_eq!(
            p(json!([1, 2, 3])).unwrap(),
            CompletionPrompt::Tokens(vec![1, 2, 3])
        );
        assert_eq!(
            p(json!([[4, 5], [6]])).unwrap(),
            CompletionPrompt::Tokens(vec![4, 5])
        );
        for bad in [
            json!([]),
            json!(7),
            json!([-1]),
            json!([1.5]),
            json!([4294967296u64]),
            json!([{}]),
            Value::Null,
        ] {
            assert!(p(bad.clone()).is_err(), "{bad}");
        }
        assert!(completion_prompt(&json!({})).is_err());
    }
}
