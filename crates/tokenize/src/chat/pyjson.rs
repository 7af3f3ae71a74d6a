//! JSON parsed the way Python's `json.loads` parses it.
//!
//! vLLM sees request bodies and tool-call `arguments` through `json.loads`:
//! a repeated key keeps its first place and its last value, integers have
//! any size, floats are rounded as Python rounds them, `NaN`/`Infinity`
//! are accepted, raw control characters in strings are not.

use std::collections::HashMap;

use super::pyvalue::{PyDict, PyInt, PyValue};

/// Python refuses to convert longer integer literals (`sys.int_info`).
const MAX_INT_DIGITS: usize = 4300;
/// Nesting deeper than this is refused (Python's own limit is near 1000).
const MAX_DEPTH: usize = 500;

/// Why `json.loads` would not give a value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PyJsonError {
    /// Python raises `JSONDecodeError`.
    #[error("invalid JSON at byte {at}: {msg}")]
    Syntax {
        /// Byte offset.
        at: usize,
        /// What was expected.
        msg: &'static str,
    },
    /// The input holds a `\uD800`-style escape with no pair: Python accepts
    /// it, but such a string cannot be encoded for tokenization.
    #[error("string holds an unpaired surrogate escape at byte {0}")]
    LoneSurrogate(usize),
    /// Python raises `ValueError` (not `JSONDecodeError`) for these.
    #[error("integer literal longer than {MAX_INT_DIGITS} digits")]
    IntTooLong,
    /// Nesting beyond what we are willing to follow.
    #[error("JSON nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

impl PyJsonError {
    /// Whether Python itself would report `JSONDecodeError` (which vLLM
    /// turns into `{}` for tool-call arguments).
    pub fn is_decode_error(&self) -> bool {
        matches!(self, PyJsonError::Syntax { .. })
    }
}

/// `json.loads(text)` for a Python `str` (a leading BOM is an error).
pub fn loads(text: &str) -> Result<PyValue, PyJsonError> {
    if text.starts_with('\u{feff}') {
        return Err(PyJsonError::Syntax {
            at: 0,
            msg: "unexpected UTF-8 BOM",
        });
    }
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        i: 0,
        depth: 0,
    };
    p.ws();
    let v = p.value()?;
    p.ws();
    if p.i != p.s.len() {
        return p.err("extra data");
    }
    Ok(v)
}

/// `json.loads(body)` for request bytes: a UTF-8 BOM is skipped, as
/// Python's encoding detection does.
pub fn loads_bytes(body: &[u8]) -> Result<PyValue, PyJsonError> {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let text = std::str::from_utf8(body).map_err(|e| PyJsonError::Syntax {
        at: e.valid_up_to(),
        msg: "invalid UTF-8",
    })?;
    loads(text)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err<T>(&self, msg: &'static str) -> Result<T, PyJsonError> {
        Err(PyJsonError::Syntax { at: self.i, msg })
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<PyValue, PyJsonError> {
        match self.s.get(self.i) {
            Some(b'"') => self.string().map(PyValue::Str),
            Some(b'{') => self.nested(Self::object),
            Some(b'[') => self.nested(Self::array),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ if self.eat("null") => Ok(PyValue::Null),
            _ if self.eat("true") => Ok(PyValue::Bool(true)),
            _ if self.eat("false") => Ok(PyValue::Bool(false)),
            _ if self.eat("NaN") => Ok(PyValue::Float(f64::NAN)),
            _ if self.eat("Infinity") => Ok(PyValue::Float(f64::INFINITY)),
            _ => self.err("expecting value"),
        }
    }

    fn nested(
        &mut self,
        f: fn(&mut Self) -> Result<PyValue, PyJsonError>,
    ) -> Result<PyValue, PyJsonError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(PyJsonError::TooDeep);
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn object(&mut self) -> Result<PyValue, PyJsonError> {
        self.i += 1;
        let mut dict = PyDict::new();
        // Index of keys once the object grows, to keep duplicate checks cheap.
        let mut index: HashMap<String, usize> = HashMap::new();
        self.ws();
        if self.eat("}") {
            return Ok(PyValue::Dict(dict));
        }
        loop {
            if self.s.get(self.i) != Some(&b'"') {
                return self.err("expecting property name enclosed in double quotes");
            }
            let key = self.string()?;
            self.ws();
            if !self.eat(":") {
                return self.err("expecting ':' delimiter");
            }
            self.ws();
            let value = self.value()?;
            match index.get(&key) {
                Some(&at) => dict.entries[at].1 = value,
                None => {
                    index.insert(key.clone(), dict.entries.len());
                    dict.entries.push((key, value));
                }
            }
            self.ws();
            if self.eat("}") {
                return Ok(PyValue::Dict(dict));
            }
            if !self.eat(",") {
                return self.err("expecting ',' delimiter");
            }
            self.ws();
        }
    }

    fn array(&mut self) -> Result<PyValue, PyJsonError> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.eat("]") {
            return Ok(PyValue::List(items));
        }
        loop {
            items.push(self.value()?);
            self.ws();
            if self.eat("]") {
                return Ok(PyValue::List(items));
            }
            if !self.eat(",") {
                return self.err("expecting ',' delimiter");
            }
            self.ws();
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.s.get(self.i) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<PyValue, PyJsonError> {
        let start = self.i;
        if self.s[self.i] == b'-' {
            self.i += 1;
            if self.eat("Infinity") {
                return Ok(PyValue::Float(f64::NEG_INFINITY));
            }
        }
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => {
                self.i = start;
                return self.err("expecting value");
            }
        }
        let int_end = self.i;
        let mut is_float = false;
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                self.i = int_end; // "1." is the int 1 followed by garbage
            } else {
                is_float = true;
            }
        }
        let before_exp = self.i;
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                self.i = before_exp;
            } else {
                is_float = true;
            }
        }
        let lit = &self.text[start..self.i];
        if is_float {
            let f: f64 = lit.parse().map_err(|_| PyJsonError::Syntax {
                at: start,
                msg: "bad number",
            })?;
            return Ok(PyValue::Float(f));
        }
        if lit.trim_start_matches('-').len() > MAX_INT_DIGITS {
            return Err(PyJsonError::IntTooLong);
        }
        Ok(PyValue::Int(match lit.parse::<i128>() {
            Ok(n) => PyInt::Small(n),
            Err(_) => PyInt::Big(lit.to_owned()),
        }))
    }

    fn hex4(&mut self) -> Result<u32, PyJsonError> {
        let hex = self.s.get(self.i..self.i + 4).unwrap_or_default();
        if hex.len() != 4 || !hex.iter().all(u8::is_ascii_hexdigit) {
            return self.err("invalid \\uXXXX escape");
        }
        self.i += 4;
        let hex = std::str::from_utf8(hex).unwrap_or("0");
        Ok(u32::from_str_radix(hex, 16).unwrap_or(0))
    }

    fn string(&mut self) -> Result<String, PyJsonError> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let run_start = self.i;
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            out.push_str(&self.text[run_start..self.i]);
            match self.s.get(self.i) {
                None => return self.err("unterminated string"),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => self.escape(&mut out)?,
                Some(_) => return self.err("invalid control character"),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), PyJsonError> {
        let at = self.i;
        self.i += 1;
        let c = match self.s.get(self.i) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.i += 1;
                let hi = self.hex4()?;
                let code = if (0xd800..0xdc00).contains(&hi) && self.s[self.i..].starts_with(b"\\u")
                {
                    let save = self.i;
                    self.i += 2;
                    let lo = self.hex4()?;
                    if (0xdc00..0xe000).contains(&lo) {
                        0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                    } else {
                        self.i = save;
                        hi
                    }
                } else {
                    hi
                };
                out.push(char::from_u32(code).ok_or(PyJsonError::LoneSurrogate(at))?);
                return Ok(());
            }
            _ => return self.err("invalid \\escape"),
        };
        self.i += 1;
        out.push(c);
        Ok(())
    }
}

#[cfg(test)]
#[path = "pyjson_tests.rs"]
mod tests;
