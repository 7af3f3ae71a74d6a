//! A MessagePack writer that picks the same encodings as Python's `msgspec`,
//! which is what vLLM uses: the shortest integer, string, binary, array and
//! map forms, and always `float64` for floats.
//!
//! The one msgspec quirk that needs a knob is the header of a struct encoded
//! as a map: msgspec sizes the header for the struct's field count (plus the
//! tag), not for the fields it actually writes, so vLLM's `BlockStored`
//! (15 fields + `type` = 16) always gets a `map16` header even when only 11
//! entries follow. [`Writer::map_header_for_struct`] reproduces that.

use thiserror::Error;

/// A value that MessagePack (or this writer) cannot represent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// A string, binary or container longer than MessagePack's 32-bit limit.
    #[error("{what} of length {len} does not fit a MessagePack 32-bit length")]
    TooLong {
        /// Which kind of item.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// An opaque value nested deeper than the writer allows (protects the
    /// stack against hand-built values).
    #[error("opaque value nested deeper than {max} levels")]
    TooDeep {
        /// The depth limit.
        max: usize,
    },
}

/// Nesting limit for opaque values, far above anything vLLM sends.
const MAX_VALUE_DEPTH: usize = 64;

/// An append-only MessagePack buffer.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

fn len_u32(what: &'static str, len: usize) -> Result<u32, EncodeError> {
    u32::try_from(len).map_err(|_| EncodeError::TooLong { what, len })
}

impl Writer {
    /// An empty writer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            buf: Vec::with_capacity(capacity),
        }
    }

    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// `nil`.
    pub fn nil(&mut self) {
        self.buf.push(0xc0);
    }

    /// A boolean.
    pub fn bool(&mut self, value: bool) {
        self.buf.push(if value { 0xc3 } else { 0xc2 });
    }

    /// A non-negative integer in its shortest unsigned form.
    pub fn uint(&mut self, value: u64) {
        if value < 0x80 {
            self.buf.push(value as u8);
        } else if let Ok(v) = u8::try_from(value) {
            self.buf.extend_from_slice(&[0xcc, v]);
        } else if let Ok(v) = u16::try_from(value) {
            self.buf.push(0xcd);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else if let Ok(v) = u32::try_from(value) {
            self.buf.push(0xce);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else {
            self.buf.push(0xcf);
            self.buf.extend_from_slice(&value.to_be_bytes());
        }
    }

    /// A signed integer: unsigned forms when non-negative (as msgspec does for
    /// Python ints), otherwise the shortest signed form.
    pub fn sint(&mut self, value: i64) {
        if let Ok(v) = u64::try_from(value) {
            self.uint(v);
        } else if value >= -32 {
            self.buf.push(value as u8);
        } else if let Ok(v) = i8::try_from(value) {
            self.buf.push(0xd0);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else if let Ok(v) = i16::try_from(value) {
            self.buf.push(0xd1);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else if let Ok(v) = i32::try_from(value) {
            self.buf.push(0xd2);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else {
            self.buf.push(0xd3);
            self.buf.extend_from_slice(&value.to_be_bytes());
        }
    }

    /// A `float64` (msgspec never writes `float32`).
    pub fn f64(&mut self, value: f64) {
        self.buf.push(0xcb);
        self.buf.extend_from_slice(&value.to_be_bytes());
    }

    /// Writes the shortest length header: the fix form `base | len` when
    /// `fix` is given and `len < limit`, else the 8-, 16- or 32-bit form from
    /// `markers` (a 0 marker means the type has no 8-bit form, as arrays).
    fn sized_header(&mut self, len: u32, fix: Option<(u8, u32)>, markers: [u8; 3]) {
        match (fix, u8::try_from(len), u16::try_from(len)) {
            (Some((base, limit)), _, _) if len < limit => self.buf.push(base | len as u8),
            (_, Ok(v), _) if markers[0] != 0 => self.buf.extend_from_slice(&[markers[0], v]),
            (_, _, Ok(v)) => {
                self.buf.push(markers[1]);
                self.buf.extend_from_slice(&v.to_be_bytes());
            }
            _ => {
                self.buf.push(markers[2]);
                self.buf.extend_from_slice(&len.to_be_bytes());
            }
        }
    }

    /// A UTF-8 string.
    pub fn str(&mut self, value: &str) -> Result<(), EncodeError> {
        let len = len_u32("string", value.len())?;
        self.sized_header(len, Some((0xa0, 32)), [0xd9, 0xda, 0xdb]);
        self.buf.extend_from_slice(value.as_bytes());
        Ok(())
    }

    /// A binary blob.
    pub fn bin(&mut self, value: &[u8]) -> Result<(), EncodeError> {
        let len = len_u32("binary", value.len())?;
        self.sized_header(len, None, [0xc4, 0xc5, 0xc6]);
        self.buf.extend_from_slice(value);
        Ok(())
    }

    /// An array header for `len` elements.
    pub fn array_len(&mut self, len: usize) -> Result<(), EncodeError> {
        let len = len_u32("array", len)?;
        self.sized_header(len, Some((0x90, 16)), [0, 0xdc, 0xdd]);
        Ok(())
    }

    /// A map header for `len` entries, in the shortest form.
    pub fn map_len(&mut self, len: usize) -> Result<(), EncodeError> {
        self.map_header_for_struct(len, len)
    }

    /// A map header holding `len` entries whose width is chosen for
    /// `struct_fields` possible entries, as msgspec does for structs.
    pub fn map_header_for_struct(
        &mut self,
        len: usize,
        struct_fields: usize,
    ) -> Result<(), EncodeError> {
        let len = len_u32("map", len)?;
        let width_for = len_u32("map", struct_fields.max(len as usize))?;
        if width_for < 16 {
            self.buf.push(0x80 | len as u8);
        } else if width_for <= u32::from(u16::MAX) {
            self.buf.push(0xde);
            self.buf.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            self.buf.push(0xdf);
            self.buf.extend_from_slice(&len.to_be_bytes());
        }
        Ok(())
    }

    /// Any opaque value (extra keys, unknown fields), in msgspec's forms.
    pub fn value(&mut self, value: &rmpv::Value) -> Result<(), EncodeError> {
        self.value_at(value, 0)
    }

    fn value_at(&mut self, value: &rmpv::Value, depth: usize) -> Result<(), EncodeError> {
        use rmpv::Value;
        if depth >= MAX_VALUE_DEPTH {
            return Err(EncodeError::TooDeep {
                max: MAX_VALUE_DEPTH,
            });
        }
        match value {
            Value::Nil => self.nil(),
            Value::Boolean(b) => self.bool(*b),
            Value::Integer(i) => match (i.as_u64(), i.as_i64()) {
                (Some(u), _) => self.uint(u),
                (None, Some(s)) => self.sint(s),
                // rmpv integers are always u64 or i64; treat anything else as nil.
                (None, None) => self.nil(),
            },
            Value::F32(f) => {
                self.buf.push(0xca);
                self.buf.extend_from_slice(&f.to_be_bytes());
            }
            Value::F64(f) => self.f64(*f),
            Value::String(s) => match s.as_str() {
                Some(text) => self.str(text)?,
                None => self.bin(s.as_bytes())?,
            },
            Value::Binary(b) => self.bin(b)?,
            Value::Array(items) => {
                self.array_len(items.len())?;
                for item in items {
                    self.value_at(item, depth + 1)?;
                }
            }
            Value::Map(entries) => {
                self.map_len(entries.len())?;
                for (k, v) in entries {
                    self.value_at(k, depth + 1)?;
                    self.value_at(v, depth + 1)?;
                }
            }
            Value::Ext(kind, data) => {
                let len = len_u32("extension", data.len())?;
                match len {
                    1 => self.buf.push(0xd4),
                    2 => self.buf.push(0xd5),
                    4 => self.buf.push(0xd6),
                    8 => self.buf.push(0xd7),
                    16 => self.buf.push(0xd8),
                    _ => self.sized_header(len, None, [0xc7, 0xc8, 0xc9]),
                }
                self.buf.extend_from_slice(&kind.to_be_bytes());
                self.buf.extend_from_slice(data);
            }
        }
        Ok(())
    }
}
