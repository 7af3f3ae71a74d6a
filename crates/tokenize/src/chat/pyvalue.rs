//! [`PyValue`]: a JSON value as Python holds it after `json.loads`.
//!
//! Templates print values back with `json.dumps`; to print the same bytes
//! we keep what Python keeps: dict order, integers of any size, and the
//! difference between `1` and `1.0`.

use super::pyjson::{PyJsonError, loads};

/// A JSON value as Python holds it after `json.loads`.
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// `null` → `None`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer literal (no fraction, no exponent).
    Int(PyInt),
    /// A literal with a fraction or exponent, or `NaN` / `Infinity`.
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    List(Vec<PyValue>),
    /// An object, in Python's dict order.
    Dict(PyDict),
}

/// A Python `int` from JSON: small ones as numbers, others as exact digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PyInt {
    /// Fits in 128 bits.
    Small(i128),
    /// Does not: decimal digits, with a leading `-` when negative.
    Big(String),
}

/// An insertion-ordered string-keyed map, like a Python dict.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PyDict {
    pub(crate) entries: Vec<(String, PyValue)>,
}

impl PyDict {
    /// An empty dict.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` like `d[key] = value`: a new key goes last, an existing one
    /// keeps its place.
    pub fn insert(&mut self, key: impl Into<String>, value: PyValue) {
        let key = key.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Like [`PyDict::insert`] for a key known to be absent.
    pub(crate) fn push_unique(&mut self, key: impl Into<String>, value: PyValue) {
        self.entries.push((key.into(), value));
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&PyValue> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Removes `key` and returns its value.
    pub fn remove(&mut self, key: &str) -> Option<PyValue> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(at).1)
    }

    /// Whether `key` is present (even with a `None` value).
    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &PyValue)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the dict has no key.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl FromIterator<(String, PyValue)> for PyDict {
    fn from_iter<I: IntoIterator<Item = (String, PyValue)>>(iter: I) -> Self {
        let mut d = PyDict::new();
        for (k, v) in iter {
            d.insert(k, v);
        }
        d
    }
}

impl IntoIterator for PyDict {
    type Item = (String, PyValue);
    type IntoIter = std::vec::IntoIter<(String, PyValue)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl PyValue {
    /// Parses JSON text as Python's `json.loads` does.
    pub fn parse(text: &str) -> Result<PyValue, PyJsonError> {
        loads(text)
    }

    /// The value of `key` when this is a dict.
    pub fn get(&self, key: &str) -> Option<&PyValue> {
        match self {
            PyValue::Dict(d) => d.get(key),
            _ => None,
        }
    }

    /// The items when this is a list.
    pub fn as_list(&self) -> Option<&[PyValue]> {
        match self {
            PyValue::List(items) => Some(items),
            _ => None,
        }
    }

    /// The integer when this is one that fits in 128 bits.
    pub fn as_i128(&self) -> Option<i128> {
        match self {
            PyValue::Int(PyInt::Small(i)) => Some(*i),
            _ => None,
        }
    }

    /// Python truthiness (`bool(x)`).
    pub fn is_truthy(&self) -> bool {
        match self {
            PyValue::Null => false,
            PyValue::Bool(b) => *b,
            PyValue::Int(PyInt::Small(i)) => *i != 0,
            PyValue::Int(PyInt::Big(_)) => true,
            PyValue::Float(f) => *f != 0.0,
            PyValue::Str(s) => !s.is_empty(),
            PyValue::List(l) => !l.is_empty(),
            PyValue::Dict(d) => !d.is_empty(),
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            PyValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Python's name of the type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            PyValue::Null => "None",
            PyValue::Bool(_) => "bool",
            PyValue::Int(_) => "int",
            PyValue::Float(_) => "float",
            PyValue::Str(_) => "str",
            PyValue::List(_) => "list",
            PyValue::Dict(_) => "dict",
        }
    }
}
