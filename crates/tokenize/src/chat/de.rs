//! serde over [`PyValue`]: the request types derive `Deserialize` and are
//! read from the Python-exact JSON tree, so free-form parts (tool schemas,
//! template kwargs) keep their key order and exact numbers.
//!
//! Errors carry the path of the offending field (`messages[2].name`).

use std::fmt;

use serde::de::value::StringDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};
use serde::forward_to_deserialize_any;

use super::pyvalue::{PyDict, PyInt, PyValue};

/// Key of the one-entry map that carries an integer wider than 128 bits
/// through serde (only [`PyValue`]'s own visitor understands it).
const BIGINT_KEY: &str = "$pyjson::bigint";

/// A deserialization error with the path where it happened.
#[derive(Debug, Clone, PartialEq)]
pub struct DeError {
    path: Vec<String>,
    msg: String,
}

impl DeError {
    fn at(mut self, segment: String) -> Self {
        self.path.push(segment);
        self
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut path = String::new();
        for seg in self.path.iter().rev() {
            if !seg.starts_with('[') && !path.is_empty() {
                path.push('.');
            }
            path.push_str(seg);
        }
        if path.is_empty() {
            f.write_str(&self.msg)
        } else {
            write!(f, "{path}: {}", self.msg)
        }
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            path: Vec::new(),
            msg: msg.to_string(),
        }
    }
}

/// Deserializes `T` from a Python value.
pub fn from_value<T: DeserializeOwned>(v: PyValue) -> Result<T, DeError> {
    T::deserialize(Deser(v))
}

struct Deser(PyValue);

impl<'de> de::Deserializer<'de> for Deser {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            PyValue::Null => visitor.visit_unit(),
            PyValue::Bool(b) => visitor.visit_bool(b),
            PyValue::Int(PyInt::Small(i)) => {
                if let Ok(small) = i64::try_from(i) {
                    visitor.visit_i64(small)
                } else if let Ok(u) = u64::try_from(i) {
                    visitor.visit_u64(u)
                } else {
                    visitor.visit_i128(i)
                }
            }
            PyValue::Int(PyInt::Big(digits)) => {
                let mut d = PyDict::new();
                d.push_unique(BIGINT_KEY, PyValue::Str(digits));
                visitor.visit_map(Map::new(d))
            }
            PyValue::Float(f) => visitor.visit_f64(f),
            PyValue::Str(s) => visitor.visit_string(s),
            PyValue::List(items) => visitor.visit_seq(Seq {
                items: items.into_iter(),
                index: 0,
            }),
            PyValue::Dict(d) => visitor.visit_map(Map::new(d)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0 {
            PyValue::Null => visitor.visit_none(),
            other => visitor.visit_some(Deser(other)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match self.0 {
            PyValue::Str(s) => {
                let d: StringDeserializer<DeError> = s.into_deserializer();
                visitor.visit_enum(d)
            }
            other => Err(de::Error::custom(format!(
                "expected a string, got {}",
                other.type_name()
            ))),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

struct Seq {
    items: std::vec::IntoIter<PyValue>,
    index: usize,
}

impl<'de> SeqAccess<'de> for Seq {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let at = self.index;
        self.index += 1;
        seed.deserialize(Deser(item))
            .map(Some)
            .map_err(|e| e.at(format!("[{at}]")))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Map {
    entries: std::vec::IntoIter<(String, PyValue)>,
    pending: Option<(String, PyValue)>,
}

impl Map {
    fn new(d: PyDict) -> Self {
        Map {
            entries: d.into_iter().collect::<Vec<_>>().into_iter(),
            pending: None,
        }
    }
}

impl<'de> MapAccess<'de> for Map {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let k = seed.deserialize(Deser(PyValue::Str(key.clone())))?;
        self.pending = Some((key, value));
        Ok(Some(k))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let (key, value) = self
            .pending
            .take()
            .ok_or_else(|| <DeError as de::Error>::custom("value requested before key"))?;
        seed.deserialize(Deser(value)).map_err(|e| e.at(key))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

impl<'de> de::Deserialize<'de> for PyValue {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PyValueVisitor)
    }
}

struct PyValueVisitor;

impl<'de> Visitor<'de> for PyValueVisitor {
    type Value = PyValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<PyValue, E> {
        Ok(PyValue::Null)
    }
    fn visit_none<E>(self) -> Result<PyValue, E> {
        Ok(PyValue::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<PyValue, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, b: bool) -> Result<PyValue, E> {
        Ok(PyValue::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<PyValue, E> {
        Ok(PyValue::Int(PyInt::Small(i.into())))
    }
    fn visit_u64<E>(self, u: u64) -> Result<PyValue, E> {
        Ok(PyValue::Int(PyInt::Small(u.into())))
    }
    fn visit_i128<E>(self, i: i128) -> Result<PyValue, E> {
        Ok(PyValue::Int(PyInt::Small(i)))
    }
    fn visit_u128<E>(self, u: u128) -> Result<PyValue, E> {
        Ok(PyValue::Int(match i128::try_from(u) {
            Ok(i) => PyInt::Small(i),
            Err(_) => PyInt::Big(u.to_string()),
        }))
    }
    fn visit_f64<E>(self, f: f64) -> Result<PyValue, E> {
        Ok(PyValue::Float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<PyValue, E> {
        Ok(PyValue::Str(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<PyValue, E> {
        Ok(PyValue::Str(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PyValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(PyValue::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PyValue, A::Error> {
        let mut d = PyDict::new();
        while let Some((k, v)) = map.next_entry::<String, PyValue>()? {
            d.insert(k, v);
        }
        if d.len() == 1
            && let Some(PyValue::Str(digits)) = d.get(BIGINT_KEY)
        {
            return Ok(PyValue::Int(PyInt::Big(digits.clone())));
        }
        Ok(PyValue::Dict(d))
    }
}

/// A JSON object as a [`PyDict`] field (anything else is an error).
impl<'de> de::Deserialize<'de> for PyDict {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match PyValue::deserialize(d)? {
            PyValue::Dict(dict) => Ok(dict),
            other => Err(de::Error::custom(format!(
                "expected an object, got {}",
                other.type_name()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::pyjson::loads;

    #[derive(Debug, serde::Deserialize)]
    struct Outer {
        #[allow(dead_code)]
        items: Vec<Inner>,
        free: PyValue,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Inner {
        #[allow(dead_code)]
        name: String,
    }

    #[test]
    fn free_form_values_survive_serde_exactly() {
        let text = r#"{"items": [], "free": {"z": 1.50, "a": 123456789012345678901234567890123456789012, "n": -0.0}}"#;
        let Ok(v) = loads(text) else {
            panic!("parse");
        };
        let outer: Outer = from_value(v.clone()).expect("deserialize");
        let PyValue::Dict(whole) = v else {
            panic!("dict")
        };
        assert_eq!(Some(&outer.free), whole.get("free"));
    }

    #[test]
    fn errors_name_the_path() {
        let v = loads(r#"{"items": [{"name": "a"}, {"name": 5}], "free": 1}"#).expect("parse");
        let err = from_value::<Outer>(v).expect_err("must fail");
        assert!(err.to_string().starts_with("items[1].name: "), "{err}");
    }
}
