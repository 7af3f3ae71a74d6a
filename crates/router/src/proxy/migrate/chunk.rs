//! A worker's chunk as the relay reads it, without building it: [`View`]
//! deserializes only the fields migration needs (the ids, the finish,
//! whether text or a parser's output is there) and skips the rest, and
//! [`without_ids`] takes `token_ids` and `prompt_token_ids` out of the
//! chunk's bytes, leaving every other byte as the worker sent it. A chunk
//! these cannot read is read the slow way (`serde_json::Value`).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// What a field held, as far as the relay cares.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// Not in the chunk.
    #[default]
    Absent,
    Null,
    EmptyText,
    Text,
    EmptyList,
    /// Anything else.
    Other,
}

impl Shape {
    /// Present with a value other than `null` and `[]`.
    pub(super) fn filled(self) -> bool {
        !matches!(self, Shape::Absent | Shape::Null | Shape::EmptyList)
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Null)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Shape, E> {
        Ok(if s.is_empty() {
            Shape::EmptyText
        } else {
            Shape::Text
        })
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Other)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        if seq.next_element::<IgnoredAny>()?.is_none() {
            return Ok(Shape::EmptyList);
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Shape::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Shape::Other)
    }
}

/// The fields of a chunk migration reads.
#[derive(Deserialize)]
pub(super) struct View {
    #[serde(default)]
    pub(super) error: Shape,
    #[serde(default)]
    pub(super) prompt_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub(super) choices: Vec<ChoiceView>,
    #[serde(default)]
    pub(super) usage: Shape,
}

/// The fields of a chunk's choice migration reads.
#[derive(Deserialize)]
pub(super) struct ChoiceView {
    #[serde(default)]
    pub(super) index: Option<u64>,
    #[serde(default)]
    pub(super) text: Shape,
    #[serde(default)]
    pub(super) delta: Option<DeltaView>,
    #[serde(default)]
    pub(super) token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub(super) prompt_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    pub(super) finish_reason: Shape,
}

/// A chat choice's `delta`, as far as migration reads it.
#[derive(Deserialize)]
pub(super) struct DeltaView {
    #[serde(default)]
    pub(super) content: Shape,
    #[serde(default)]
    pub(super) tool_calls: Shape,
    #[serde(default)]
    pub(super) reasoning_content: Shape,
    #[serde(default)]
    pub(super) reasoning: Shape,
}

/// The chunk `json` without its `token_ids` and `prompt_token_ids` fields
/// (lists of numbers, or `null`), every other byte as it was; `None` when
/// it is not shaped as expected around them.
///
/// A key is found by the bytes `token_ids"`: inside a JSON string a quote
/// is always escaped, so those bytes end a key (or a string value, which a
/// `:` cannot follow).
pub(super) fn without_ids(json: &[u8]) -> Option<Vec<u8>> {
    const NEEDLE: &[u8] = b"token_ids\"";
    let mut out = Vec::with_capacity(json.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(off) = find(&json[from..], NEEDLE) {
        let at = from + off;
        let key_start = if json[..at].ends_with(b"\"prompt_") {
            at - 8
        } else if json[..at].ends_with(b"\"") {
            at - 1
        } else {
            // Another key ending the same way: not ours.
            from = at + NEEDLE.len();
            continue;
        };
        let mut end = skip_ws(json, at + NEEDLE.len());
        if json.get(end) != Some(&b':') {
            from = at + NEEDLE.len();
            continue;
        }
        end = skip_ws(json, end + 1);
        end = match json.get(end)? {
            b'[' => {
                let close = end + json[end..].iter().position(|&b| b == b']')?;
                let numbers = json[end + 1..close]
                    .iter()
                    .all(|b| b.is_ascii_digit() || *b == b',' || b.is_ascii_whitespace());
                if !numbers {
                    return None;
                }
                close + 1
            }
            b'n' if json[end..].starts_with(b"null") => end + 4,
            _ => return None,
        };
        // The separator goes with it: the comma before, else the one after.
        let before = json[..key_start]
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())?;
        match json[before] {
            // The comma before (unless an earlier removal took it).
            b',' if before >= copied => {
                out.extend_from_slice(&json[copied..before]);
                copied = end;
            }
            // First in its object: the comma after goes.
            _ if before < copied || json[before] == b'{' => {
                out.extend_from_slice(&json[copied..key_start]);
                let after = skip_ws(json, end);
                copied = if json.get(after) == Some(&b',') {
                    skip_ws(json, after + 1)
                } else {
                    end
                };
            }
            _ => return None,
        }
        from = copied;
    }
    out.extend_from_slice(&json[copied..]);
    Some(out)
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// `v` without the id fields, the slow way.
    fn stripped(mut v: Value) -> Value {
        if let Some(o) = v.as_object_mut() {
            o.remove("prompt_token_ids");
        }
        if let Some(cs) = v["choices"].as_array_mut() {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                c.remove("token_ids");
                c.remove("prompt_token_ids");
            }
        }
        v
    }

    #[test]
    fn ids_come_out_and_nothing_else_changes() {
        for v in [
            json!({"id": "c", "choices": [{"index": 0, "text": "a", "token_ids": [1, 2], "prompt_token_ids": [3], "finish_reason": null}]}),
            json!({"id": "c", "prompt_token_ids": [1], "choices": [{"delta": {"content": "\"token_ids\": [9]"}, "token_ids": [5]}]}),
            json!({"choices": [{"token_ids": [1], "text": "x", "my_token_ids": [4]}]}),
            json!({"choices": [{"token_ids": null}], "usage": {"prompt_tokens": 1}}),
            json!({"id": "c", "choices": []}),
            json!({"choices": [{"token_ids": [1], "prompt_token_ids": [2], "text": "a"}]}),
            json!({"choices": [{"text": "a", "token_ids": [1], "prompt_token_ids": [2]}]}),
        ] {
            let compact = v.to_string();
            let out = without_ids(compact.as_bytes()).expect(&compact);
            let got: Value = serde_json::from_slice(&out).expect("still JSON");
            assert_eq!(got, stripped(v.clone()), "{compact}");
            let spaced = serde_json::to_string_pretty(&v).unwrap();
            let out = without_ids(spaced.as_bytes()).expect(&spaced);
            let got: Value = serde_json::from_slice(&out).expect("still JSON");
            assert_eq!(got, stripped(v), "{spaced}");
        }
        // The text keeps its bytes: only the key goes.
        let raw = br#"{"choices":[{"text":"\u00e9 x","token_ids":[7]}]}"#;
        assert_eq!(
            without_ids(raw).unwrap(),
            br#"{"choices":[{"text":"\u00e9 x"}]}"#.to_vec()
        );
        assert!(without_ids(br#"{"choices":[{"token_ids":{"a":1}}]}"#).is_none());
    }

    #[test]
    fn a_view_reads_what_migration_needs() {
        let v: View = serde_json::from_slice(
            br#"{"id":"c","prompt_token_ids":[1,2],"choices":[{"index":0,"delta":{"content":"","tool_calls":[]},"finish_reason":null,"token_ids":[3]}],"usage":null}"#,
        )
        .unwrap();
        assert_eq!(v.prompt_token_ids, Some(vec![1, 2]));
        assert_eq!(v.usage, Shape::Null);
        assert_eq!(v.error, Shape::Absent);
        let c = &v.choices[0];
        assert_eq!(c.token_ids, Some(vec![3]));
        assert!(!c.finish_reason.filled());
        let d = c.delta.as_ref().unwrap();
        assert_eq!(d.content, Shape::EmptyText);
        assert!(!d.tool_calls.filled());
    }
}
