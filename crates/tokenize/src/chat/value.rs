//! Template values with Python's semantics: dicts that keep insertion order
//! and integers wider than 128 bits.
//!
//! minijinja's own maps are sorted, but `tojson` of a tool schema must keep
//! the client's key order, as Python's dicts do.

use std::fmt;
use std::sync::Arc;

use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Rest, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::pyvalue::{PyDict, PyInt, PyValue};

/// A Python dict as a template value (iteration and `tojson` in order).
#[derive(Debug)]
pub struct PyDictObject {
    entries: Vec<(Value, Value)>,
}

impl Object for PyDictObject {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let keys: Vec<Value> = self.entries.iter().map(|(k, _)| k.clone()).collect();
        Enumerator::Values(keys)
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A Python int beyond 128 bits: prints and serializes as its digits.
#[derive(Debug)]
pub struct BigInt(pub String);

impl Object for BigInt {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn is_true(self: &Arc<Self>) -> bool {
        true
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Converts a Python value to a template value.
pub fn to_value(v: &PyValue) -> Value {
    match v {
        PyValue::Null => Value::from(()),
        PyValue::Bool(b) => Value::from(*b),
        PyValue::Int(PyInt::Small(i)) => match i64::try_from(*i) {
            Ok(small) => Value::from(small),
            Err(_) => Value::from(*i),
        },
        PyValue::Int(PyInt::Big(digits)) => match digits.parse::<u128>() {
            Ok(u) => Value::from(u),
            Err(_) => Value::from_object(BigInt(digits.clone())),
        },
        PyValue::Float(f) => Value::from(*f),
        PyValue::Str(s) => Value::from(s.as_str()),
        PyValue::List(items) => Value::from(items.iter().map(to_value).collect::<Vec<_>>()),
        PyValue::Dict(d) => dict_value(d),
    }
}

/// Converts a dict, keeping its order.
pub fn dict_value(d: &PyDict) -> Value {
    Value::from_object(PyDictObject {
        entries: d
            .iter()
            .map(|(k, v)| (Value::from(k.as_str()), to_value(v)))
            .collect(),
    })
}

/// A Python tuple (from `dict.items()`, `|items`, `|dictsort`): iterates
/// like a list, prints with parentheses.
#[derive(Debug)]
pub struct PyTuple(pub Vec<Value>);

impl Object for PyTuple {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let idx = i64::try_from(key.clone()).ok()?;
        let idx = if idx < 0 {
            self.0.len() as i64 + idx
        } else {
            idx
        };
        self.0.get(usize::try_from(idx).ok()?).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }
}

/// The `(key, value)` pairs of a mapping, as Python's `dict.items()`.
pub fn items_of(map: &Value) -> Result<Value, Error> {
    if map.is_undefined() {
        return Ok(Value::from(Vec::<Value>::new()));
    }
    if map.kind() != ValueKind::Map {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "items() needs a mapping",
        ));
    }
    let mut out = Vec::new();
    for key in map.try_iter()? {
        let value = map.get_item(&key)?;
        out.push(Value::from_object(PyTuple(vec![key, value])));
    }
    Ok(Value::from(out))
}

/// The `items` filter with Python tuples.
pub fn items_filter(map: &Value) -> Result<Value, Error> {
    items_of(map)
}

/// The `dictsort` filter with Python tuples.
pub fn dictsort_filter(map: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let sorted = minijinja::filters::dictsort(map, kwargs)?;
    let pairs: Vec<Value> = sorted
        .try_iter()?
        .map(|pair| {
            Value::from_object(PyTuple(
                pair.try_iter().map(Iterator::collect).unwrap_or_default(),
            ))
        })
        .collect();
    Ok(Value::from(pairs))
}

/// Dict literals of the template (rewritten to `__pydict(k, v, ...)`):
/// Python keeps their written order, minijinja's own maps sort keys.
pub fn pydict_literal(args: Rest<Value>) -> Result<Value, Error> {
    if !args.len().is_multiple_of(2) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "dict literal needs key/value pairs",
        ));
    }
    let mut entries: Vec<(Value, Value)> = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks(2) {
        match entries.iter_mut().find(|(k, _)| *k == pair[0]) {
            Some(slot) => slot.1 = pair[1].clone(),
            None => entries.push((pair[0].clone(), pair[1].clone())),
        }
    }
    Ok(Value::from_object(PyDictObject { entries }))
}
