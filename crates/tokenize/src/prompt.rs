//! The prompt of an OpenAI request, as token ids: what the engine will
//! hash into prefix-cache blocks.
//!
//! [`PromptField`] reads the `prompt` straight from the body's JSON: a
//! 15k-token id list costs half as much as through a `serde_json::Value`
//! (numbers as values, then copied out).

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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

/// The `prompt` of a `/v1/completions` body: a string, a list of strings,
/// token ids, or a list of token-id lists. A batch goes to one worker, so
/// its first prompt decides the route. A shape vLLM rejects is an `Err`
/// here, not a deserialization error, so the rest of the body still
/// parses and the client is told what is wrong with the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptField(pub Result<CompletionPrompt, InvalidPrompt>);

const SHAPES: &str = "must be a string, a list of strings, or token ids";

fn invalid(what: impl fmt::Display) -> InvalidPrompt {
    InvalidPrompt(format!("prompt {what}"))
}

fn bad_id(id: impl fmt::Display) -> InvalidPrompt {
    InvalidPrompt(format!("token id {id} is not an unsigned 32-bit integer"))
}

/// The prompt of a parsed completions body (see [`PromptField`]).
pub fn completion_prompt(body: &Value) -> Result<CompletionPrompt, InvalidPrompt> {
    match body.get("prompt") {
        None => Err(invalid("is required")),
        Some(v) => {
            PromptField::deserialize(v)
                .map_err(|e| invalid(format_args!("is not valid: {e}")))?
                .0
        }
    }
}

/// The `prompt` whose JSON text is `text` (the value alone, as a request's
/// entry holds it). A plain list of token ids, the common shape of a long
/// prompt, is read by [`read_token_ids`](crate::read_token_ids) (a 15k-id prompt in a few tens of
/// µs); any other text goes through [`PromptField`], which gives the same
/// answer for a plain list, only slower.
pub fn prompt_from_json(text: &str) -> Result<CompletionPrompt, InvalidPrompt> {
    let mut ids = Vec::new();
    if crate::read_token_ids(text.as_bytes(), &mut ids).is_some() && !ids.is_empty() {
        return Ok(CompletionPrompt::Tokens(ids));
    }
    serde_json::from_str::<PromptField>(text)
        .map_err(|e| invalid(format_args!("is not valid: {e}")))?
        .0
}

/// `cache_salt`, which vLLM mixes into the first block: the field's value
/// (`Null` when absent); an empty salt is none.
pub fn cache_salt(field: &Value) -> Option<String> {
    field.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

impl<'de> Deserialize<'de> for PromptField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PromptVisitor).map(PromptField)
    }
}

/// Drains what is left of a sequence, so a rejected prompt still parses.
fn drain<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// The rest of a token-id list, after `ids`; the first bad id is the error.
fn token_ids<'de, A: SeqAccess<'de>>(
    mut seq: A,
    mut ids: Vec<u32>,
) -> Result<Result<Vec<u32>, InvalidPrompt>, A::Error> {
    ids.reserve(seq.size_hint().unwrap_or(0));
    while let Some(TokenId(id)) = seq.next_element()? {
        match id {
            Ok(id) => ids.push(id),
            Err(e) => {
                drain(seq)?;
                return Ok(Err(e));
            }
        }
    }
    Ok(Ok(ids))
}

struct PromptVisitor;

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = Result<CompletionPrompt, InvalidPrompt>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt")
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Ok(CompletionPrompt::Text(s.to_owned())))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(invalid("is required")))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(invalid(SHAPES)))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(invalid(SHAPES)))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(invalid(SHAPES)))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(invalid(SHAPES)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(Err(invalid(SHAPES)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let result = match seq.next_element::<FirstItem>()? {
            None => Err(invalid("must not be empty")),
            Some(FirstItem::Text(s)) => Ok(CompletionPrompt::Text(s)),
            Some(FirstItem::Id(Ok(id))) => {
                return Ok(token_ids(seq, vec![id])?.map(CompletionPrompt::Tokens));
            }
            Some(FirstItem::Id(Err(e))) => Err(e),
            Some(FirstItem::Ids(ids)) => ids.map(CompletionPrompt::Tokens),
            Some(FirstItem::Other) => Err(invalid(SHAPES)),
        };
        drain(seq)?;
        Ok(result)
    }
}

/// The first item of a prompt list, which decides its shape.
enum FirstItem {
    Text(String),
    Id(Result<u32, InvalidPrompt>),
    Ids(Result<Vec<u32>, InvalidPrompt>),
    Other,
}

impl<'de> Deserialize<'de> for FirstItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FirstItemVisitor)
    }
}

struct FirstItemVisitor;

impl<'de> Visitor<'de> for FirstItemVisitor {
    type Value = FirstItem;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt item")
    }

    fn visit_str<E>(self, s: &str) -> Result<FirstItem, E> {
        Ok(FirstItem::Text(s.to_owned()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<FirstItem, E> {
        Ok(FirstItem::Id(u32::try_from(n).map_err(|_| bad_id(n))))
    }

    fn visit_i64<E>(self, n: i64) -> Result<FirstItem, E> {
        Ok(FirstItem::Id(Err(bad_id(n))))
    }

    fn visit_f64<E>(self, n: f64) -> Result<FirstItem, E> {
        Ok(FirstItem::Id(Err(bad_id(n))))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<FirstItem, A::Error> {
        Ok(FirstItem::Ids(token_ids(seq, Vec::new())?))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<FirstItem, A::Error> {
        drain_map(map)?;
        Ok(FirstItem::Other)
    }

    fn visit_unit<E>(self) -> Result<FirstItem, E> {
        Ok(FirstItem::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<FirstItem, E> {
        Ok(FirstItem::Other)
    }
}

/// One id of a token-id list; anything but an unsigned 32-bit integer is
/// an `Err` (consumed whole).
struct TokenId(Result<u32, InvalidPrompt>);

impl<'de> Deserialize<'de> for TokenId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TokenIdVisitor).map(TokenId)
    }
}

struct TokenIdVisitor;

impl<'de> Visitor<'de> for TokenIdVisitor {
    type Value = Result<u32, InvalidPrompt>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a token id")
    }

    fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
        Ok(u32::try_from(n).map_err(|_| bad_id(n)))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Self::Value, E> {
        Ok(Err(bad_id(n)))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Self::Value, E> {
        Ok(Err(bad_id(n)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Err(bad_id(format_args!("{s:?}"))))
    }

    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Err(bad_id(b)))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(bad_id("null")))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain(seq)?;
        Ok(Err(bad_id("[...]")))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(Err(bad_id("{...}")))
    }
}

#[cfg(test)]
#[path = "prompt_tests.rs"]
mod tests;
