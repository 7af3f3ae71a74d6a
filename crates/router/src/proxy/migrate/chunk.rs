//! A worker's chunk as the relay reads it, without building it: [`View`]
//! holds only the fields migration needs (the finish, whether text or a
//! parser's output is there, the usage, an error). `ids`' walk over the
//! chunk's bytes fills it when it can vouch for the chunk (almost every
//! chunk); else serde deserializes it here from the chunk without its id
//! fields, skipping the rest. A chunk neither can read is read the slow
//! way (`serde_json::Value`).

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
#[derive(Debug, PartialEq, Eq, Deserialize)]
pub(super) struct View {
    #[serde(default)]
    pub(super) error: Shape,
    #[serde(default)]
    pub(super) choices: Choices,
    #[serde(default)]
    pub(super) usage: Shape,
}

/// A chunk's `choices` as migration reads them: the first, and whether
/// there are others or one whose `index` is not 0 (read without building
/// a list).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Choices {
    pub(super) first: Option<ChoiceView>,
    /// More than one choice, or a choice of another index.
    pub(super) several: bool,
}

impl<'de> Deserialize<'de> for Choices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(ChoicesVisitor)
    }
}

struct ChoicesVisitor;

impl<'de> Visitor<'de> for ChoicesVisitor {
    type Value = Choices;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of choices")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Choices, A::Error> {
        let first: Option<ChoiceView> = seq.next_element()?;
        let mut several = first.as_ref().is_some_and(|c| c.index.unwrap_or(0) != 0);
        while seq.next_element::<ChoiceView>()?.is_some() {
            several = true;
        }
        Ok(Choices { first, several })
    }
}

/// The fields of a chunk's choice migration reads.
#[derive(Debug, PartialEq, Eq, Deserialize)]
pub(super) struct ChoiceView {
    #[serde(default)]
    pub(super) index: Option<u64>,
    #[serde(default)]
    pub(super) text: Shape,
    #[serde(default)]
    pub(super) delta: Option<DeltaView>,
    #[serde(default)]
    pub(super) finish_reason: Shape,
}

/// A chat choice's `delta`, as far as migration reads it.
#[derive(Debug, PartialEq, Eq, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_reads_what_migration_needs() {
        let v: View = serde_json::from_slice(
            br#"{"id":"c","choices":[{"index":0,"delta":{"content":"","tool_calls":[]},"finish_reason":null}],"usage":null}"#,
        )
        .unwrap();
        assert_eq!(v.usage, Shape::Null);
        assert_eq!(v.error, Shape::Absent);
        let c = v.choices.first.as_ref().unwrap();
        assert!(!v.choices.several);
        assert!(!c.finish_reason.filled());
        let d = c.delta.as_ref().unwrap();
        assert_eq!(d.content, Shape::EmptyText);
        assert!(!d.tool_calls.filled());
    }

    #[test]
    fn choices_say_when_there_are_several_or_another_index() {
        let read = |json: &str| serde_json::from_str::<View>(json).unwrap().choices;
        let one = read(r#"{"choices":[{"index":0,"text":"a"}]}"#);
        assert!(!one.several);
        assert_eq!(one.first.unwrap().text, Shape::Text);
        assert!(read(r#"{"choices":[{"index":0},{"index":1}]}"#).several);
        assert!(read(r#"{"choices":[{"index":1,"text":""}]}"#).several);
        let none = read(r#"{"choices":[]}"#);
        assert!(none.first.is_none() && !none.several);
        assert!(read(r#"{"usage":null}"#).first.is_none());
        // Not a list, or a choice that is not one: the chunk is not read.
        assert!(serde_json::from_str::<View>(r#"{"choices":null}"#).is_err());
        assert!(serde_json::from_str::<View>(r#"{"choices":[{"index":0},3]}"#).is_err());
    }
}
