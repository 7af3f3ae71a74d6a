//! The byte walk over a worker's chunk ([`Walk`]): strings, numbers,
//! literals and nested values, never recursing. `ids` walks the chunk's
//! structure with it.
//!
//! Two readings at once. The *lenient* one is what finds the id fields:
//! it follows strings (with their escapes) and nesting, and refuses only
//! what leaves the structure unclear (an unterminated string, a bracket
//! too many). The *strict* one checks, on the side, that the chunk is JSON
//! that serde reads without doubt, and tells the shape of the values the
//! relay reads ([`Shape`]): escapes, control characters, UTF-8, literals,
//! numbers, nesting. Whatever it does not vouch for (invalid JSON, but
//! also what serde may read otherwise: an exponent, a number too long for
//! an `f64`, an escaped surrogate, an escaped key, a repeated field, nesting
//! near serde's depth limit) clears [`Walk::sure`]: the relay then asks
//! serde, as before the walk read these fields.

use std::ops::Range;

use super::chunk::Shape;

/// Nesting accepted inside one value by the strict reading (serde's limit
/// is 128 in all; a chunk's own levels are four).
const MAX_DEPTH: u32 = 100;

/// A number longer than this may not fit an `f64` (serde refuses it).
const MAX_NUMBER: usize = 300;

/// The walk over one chunk's bytes.
pub(super) struct Walk<'a> {
    pub(super) b: &'a [u8],
    pub(super) i: usize,
    /// Everything walked so far is JSON serde reads as the strict reading
    /// says.
    pub(super) sure: bool,
}

pub(super) fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// A byte that may follow a number or a literal.
fn ends_token(b: Option<u8>) -> bool {
    b.is_none_or(|b| matches!(b, b',' | b'}' | b']') || is_blank(b))
}

impl<'a> Walk<'a> {
    pub(super) fn new(b: &'a [u8]) -> Self {
        Walk {
            b,
            i: 0,
            sure: true,
        }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    pub(super) fn blank(&mut self) {
        while self.peek().is_some_and(is_blank) {
            self.i += 1;
        }
    }

    pub(super) fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// The string at `i` (its opening quote); returns its raw content.
    /// Escapes, control characters and UTF-8 are checked on the side.
    pub(super) fn string(&mut self) -> Option<Range<usize>> {
        self.expect(b'"')?;
        let start = self.i;
        let mut ascii = true;
        loop {
            match self.peek()? {
                b'"' => break,
                b'\\' => {
                    self.escape();
                    self.i += 2;
                }
                0..=0x1f => {
                    self.sure = false;
                    self.i += 1;
                }
                0x80.. => {
                    ascii = false;
                    self.i += 1;
                }
                _ => self.i += 1,
            }
        }
        let content = start..self.i;
        self.i += 1;
        if !ascii && std::str::from_utf8(self.b.get(content.clone())?).is_err() {
            self.sure = false;
        }
        Some(content)
    }

    /// Checks the escape at `i` (its backslash): one serde reads alike
    /// (a `\u` escape of a surrogate is left to serde).
    fn escape(&mut self) {
        let ok = match self.b.get(self.i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => true,
            Some(b'u') => self
                .b
                .get(self.i + 2..self.i + 6)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u16::from_str_radix(h, 16).ok())
                .is_some_and(|c| !(0xD800..=0xDFFF).contains(&c)),
            _ => false,
        };
        if !ok {
            self.sure = false;
        }
    }

    /// Skips the value at `i` and returns its shape: read strictly when
    /// it can be, else (the walk no longer sure) the lenient way.
    pub(super) fn shape(&mut self) -> Option<Shape> {
        let start = self.i;
        if let Some(shape) = self.strict() {
            return Some(shape);
        }
        self.sure = false;
        self.i = start;
        self.skip_value()?;
        Some(Shape::Other)
    }

    /// The value at `i`, read strictly: `None` when it is not JSON serde
    /// reads without doubt (the position is then anywhere).
    fn strict(&mut self) -> Option<Shape> {
        let shape = match self.peek()? {
            b'{' => Shape::Other,
            b'[' => {
                let start = self.i;
                self.i += 1;
                self.blank();
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(Shape::EmptyList);
                }
                self.i = start;
                Shape::Other
            }
            _ => return self.scalar(),
        };
        // Bit 0 of `objects` says whether the innermost open container is
        // an object; one bit per level, so no allocation.
        let mut objects: u128 = 0;
        let mut depth = 0;
        loop {
            // A value starts at `i`.
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    if depth == MAX_DEPTH {
                        return None;
                    }
                    let object = open == b'{';
                    objects = (objects << 1) | u128::from(object);
                    depth += 1;
                    self.i += 1;
                    self.blank();
                    let close = if object { b'}' } else { b']' };
                    if self.peek()? != close {
                        if object {
                            self.key()?;
                        }
                        continue;
                    }
                    self.i += 1;
                    objects >>= 1;
                    depth -= 1;
                }
                _ => {
                    self.scalar()?;
                }
            }
            // A value ended: the next one, or the ends of containers.
            loop {
                if depth == 0 {
                    return Some(shape);
                }
                self.blank();
                let object = objects & 1 == 1;
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        self.blank();
                        if object {
                            self.key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.i += 1;
                objects >>= 1;
                depth -= 1;
            }
        }
    }

    /// An object's key at `i`, its colon and the blanks after.
    fn key(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.string()?;
        self.blank();
        self.expect(b':')?;
        self.blank();
        Some(())
    }

    /// A string, literal or number at `i`, read strictly.
    fn scalar(&mut self) -> Option<Shape> {
        match self.peek()? {
            b'"' => {
                let s = self.string()?;
                Some(if s.is_empty() {
                    Shape::EmptyText
                } else {
                    Shape::Text
                })
            }
            b'n' => self.literal(b"null").then_some(Shape::Null),
            b't' => self.literal(b"true").then_some(Shape::Other),
            b'f' => self.literal(b"false").then_some(Shape::Other),
            b'-' | b'0'..=b'9' => self.number().map(|_| Shape::Other),
            _ => None,
        }
    }

    /// The literal `word` at `i`, a whole token.
    pub(super) fn literal(&mut self, word: &[u8]) -> bool {
        let end = self.i + word.len();
        if self.b.get(self.i..end) != Some(word) || !ends_token(self.b.get(end).copied()) {
            return false;
        }
        self.i = end;
        true
    }

    /// A number at `i` as JSON writes it, without an exponent and short
    /// enough for an `f64`; returns its digits' range when it is a plain
    /// non-negative integer.
    pub(super) fn number(&mut self) -> Option<Option<Range<usize>>> {
        let start = self.i;
        let digits = |w: &mut Self| {
            let from = w.i;
            while w.peek().is_some_and(|b| b.is_ascii_digit()) {
                w.i += 1;
            }
            w.i - from
        };
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let int_start = self.i;
        let n = digits(self);
        if n == 0 || (n > 1 && self.b.get(int_start) == Some(&b'0')) {
            return None;
        }
        let mut integer = !negative;
        if self.peek() == Some(b'.') {
            self.i += 1;
            if digits(self) == 0 {
                return None;
            }
            integer = false;
        }
        if !ends_token(self.peek()) || self.i - start > MAX_NUMBER {
            return None;
        }
        Some(integer.then_some(int_start..self.i))
    }

    /// Skips any value the lenient way (nested ones by counting, not
    /// recursing).
    pub(super) fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.i += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.i += 1;
                }
                b',' | b':' if depth > 0 => self.i += 1,
                b if is_blank(b) => self.i += 1,
                // A number or a literal.
                _ => {
                    let rest = self.b.get(self.i..)?;
                    let len = rest
                        .iter()
                        .position(|&b| matches!(b, b',' | b'}' | b']' | b':') || is_blank(b))
                        .unwrap_or(rest.len());
                    if len == 0 {
                        return None;
                    }
                    self.i += len;
                }
            }
            if depth == 0 {
                return Some(());
            }
        }
    }

    /// An id field's value at `i`: a list of digits, commas and blanks, or
    /// `null`. Returns the list's range (`None` for `null`).
    pub(super) fn id_list(&mut self) -> Option<Option<Range<usize>>> {
        let start = self.i;
        if self.b.get(start..)?.starts_with(b"null") {
            self.i += 4;
            return Some(None);
        }
        self.expect(b'[')?;
        let rest = self.b.get(self.i..)?;
        let len = rest
            .iter()
            .position(|&b| !(b.is_ascii_digit() || b == b',' || is_blank(b)))?;
        self.i += len;
        self.expect(b']')?;
        Some(Some(start..self.i))
    }
}
