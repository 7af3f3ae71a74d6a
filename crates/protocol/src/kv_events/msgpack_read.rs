//! A bounded, zero-copy MessagePack reader for untrusted KV-event payloads.
//!
//! We read the payload with our own small cursor instead of decoding it into a
//! generic value tree first: the typed decoder then allocates only what the
//! model keeps (a `u32` per token, not a 56-byte value), every length is
//! checked against the bytes that are actually left before anything is
//! allocated, and every error carries the byte offset where it happened.

pub use super::wire_error::WireError;

/// The bounds that apply to opaque values decoded as [`rmpv::Value`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpaqueBudget {
    /// Items (scalars and containers) still allowed in this payload.
    pub items_left: usize,
    /// The initial item budget, for error messages.
    pub max_items: usize,
    /// Maximum nesting depth of one opaque value.
    pub max_depth: usize,
}

/// A cursor over one MessagePack payload. Cloning it gives an independent
/// look-ahead cursor at the same position.
#[derive(Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Describes a marker byte for error messages.
fn marker_name(marker: u8) -> &'static str {
    match marker {
        0x00..=0x7f | 0xcc..=0xcf => "unsigned int",
        0xe0..=0xff | 0xd0..=0xd3 => "signed int",
        0x80..=0x8f | 0xde | 0xdf => "map",
        0x90..=0x9f | 0xdc | 0xdd => "array",
        0xa0..=0xbf | 0xd9..=0xdb => "string",
        0xc0 => "nil",
        0xc1 => "reserved marker 0xc1",
        0xc2 | 0xc3 => "bool",
        0xc4..=0xc6 => "binary",
        0xc7..=0xc9 | 0xd4..=0xd8 => "extension",
        0xca | 0xcb => "float",
    }
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// The offset of the next unread byte.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// How many bytes are left.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let start = self.pos;
        let end = start.checked_add(n).filter(|&end| end <= self.buf.len());
        match end.and_then(|end| self.buf.get(start..end)) {
            Some(bytes) => {
                self.pos = start + n;
                Ok(bytes)
            }
            None => Err(WireError::Truncated {
                offset: start,
                needed: n.saturating_sub(self.remaining()),
            }),
        }
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn read_marker(&mut self) -> Result<u8, WireError> {
        Ok(self.take_array::<1>()?[0])
    }

    /// The next marker byte, without consuming it.
    pub fn peek(&self) -> Result<u8, WireError> {
        self.buf.get(self.pos).copied().ok_or(WireError::Truncated {
            offset: self.pos,
            needed: 1,
        })
    }

    fn length(&mut self, width: usize) -> Result<usize, WireError> {
        let len = match width {
            1 => u64::from(self.take_array::<1>()?[0]),
            2 => u64::from(u16::from_be_bytes(self.take_array()?)),
            _ => u64::from(u32::from_be_bytes(self.take_array()?)),
        };
        Ok(usize::try_from(len).unwrap_or(usize::MAX))
    }

    fn mismatch(offset: usize, expected: &'static str, marker: u8) -> WireError {
        WireError::UnexpectedType {
            offset,
            expected,
            found: marker_name(marker),
        }
    }

    /// The error for finding something other than `expected` at the current
    /// position (for callers that dispatch on [`Reader::peek`] themselves).
    pub fn unexpected(&self, expected: &'static str) -> WireError {
        match self.peek() {
            Ok(marker) => Self::mismatch(self.pos, expected, marker),
            Err(truncated) => truncated,
        }
    }

    /// Consumes a nil if one is next; reports whether it did.
    pub fn try_nil(&mut self) -> Result<bool, WireError> {
        if self.peek()? == 0xc0 {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// Reads an array header. The length is checked against `max` and
    /// against the bytes left (every element takes at least one byte), so a
    /// lying header cannot make the caller over-allocate.
    pub fn read_array_len(&mut self, max: usize) -> Result<usize, WireError> {
        let offset = self.pos;
        let marker = self.read_marker()?;
        let len = match marker {
            0x90..=0x9f => usize::from(marker & 0x0f),
            0xdc => self.length(2)?,
            0xdd => self.length(4)?,
            _ => return Err(Self::mismatch(offset, "array", marker)),
        };
        let max = max.min(self.remaining());
        if len > max {
            return Err(WireError::TooLong {
                offset,
                what: "array",
                len,
                max,
            });
        }
        Ok(len)
    }

    /// Reads a map header, bounded like [`Reader::read_array_len`] (every
    /// entry takes at least two bytes).
    pub fn read_map_len(&mut self, max: usize) -> Result<usize, WireError> {
        let offset = self.pos;
        let marker = self.read_marker()?;
        let len = match marker {
            0x80..=0x8f => usize::from(marker & 0x0f),
            0xde => self.length(2)?,
            0xdf => self.length(4)?,
            _ => return Err(Self::mismatch(offset, "map", marker)),
        };
        let max = max.min(self.remaining() / 2);
        if len > max {
            return Err(WireError::TooLong {
                offset,
                what: "map",
                len,
                max,
            });
        }
        Ok(len)
    }

    /// Reads a UTF-8 string, borrowed from the payload.
    pub fn read_str(&mut self) -> Result<&'a str, WireError> {
        let offset = self.pos;
        let marker = self.read_marker()?;
        let len = match marker {
            0xa0..=0xbf => usize::from(marker & 0x1f),
            0xd9 => self.length(1)?,
            0xda => self.length(2)?,
            0xdb => self.length(4)?,
            _ => return Err(Self::mismatch(offset, "string", marker)),
        };
        let start = self.pos;
        std::str::from_utf8(self.take(len)?).map_err(|_| WireError::InvalidUtf8 { offset: start })
    }

    /// Reads a binary blob, borrowed from the payload.
    pub fn read_bin(&mut self) -> Result<&'a [u8], WireError> {
        let offset = self.pos;
        let marker = self.read_marker()?;
        let len = match marker {
            0xc4 => self.length(1)?,
            0xc5 => self.length(2)?,
            0xc6 => self.length(4)?,
            _ => return Err(Self::mismatch(offset, "binary", marker)),
        };
        self.take(len)
    }

    /// Reads an integer of any MessagePack width, widened to `i128` so that
    /// both `u64` and `i64` values are exact.
    pub fn read_int(&mut self) -> Result<i128, WireError> {
        let offset = self.pos;
        let marker = self.read_marker()?;
        Ok(match marker {
            0x00..=0x7f => i128::from(marker),
            0xe0..=0xff => i128::from(marker as i8),
            0xcc => i128::from(self.take_array::<1>()?[0]),
            0xcd => i128::from(u16::from_be_bytes(self.take_array()?)),
            0xce => i128::from(u32::from_be_bytes(self.take_array()?)),
            0xcf => i128::from(u64::from_be_bytes(self.take_array()?)),
            0xd0 => i128::from(i8::from_be_bytes(self.take_array()?)),
            0xd1 => i128::from(i16::from_be_bytes(self.take_array()?)),
            0xd2 => i128::from(i32::from_be_bytes(self.take_array()?)),
            0xd3 => i128::from(i64::from_be_bytes(self.take_array()?)),
            _ => return Err(Self::mismatch(offset, "integer", marker)),
        })
    }

    /// Reads an integer that must fit `T` (named `target` in errors).
    pub fn read_int_as<T: TryFrom<i128>>(&mut self, target: &'static str) -> Result<T, WireError> {
        let offset = self.pos;
        let value = self.read_int()?;
        T::try_from(value).map_err(|_| WireError::IntOutOfRange {
            offset,
            value,
            target,
        })
    }

    /// Reads a float (32- or 64-bit) as `f64`.
    pub fn read_f64(&mut self) -> Result<f64, WireError> {
        let offset = self.pos;
        let marker = self.read_marker()?;
        match marker {
            0xca => Ok(f64::from(f32::from_be_bytes(self.take_array()?))),
            0xcb => Ok(f64::from_be_bytes(self.take_array()?)),
            _ => Err(Self::mismatch(offset, "float", marker)),
        }
    }

    /// Reads any value as an opaque [`rmpv::Value`], within `budget`.
    pub fn read_value(&mut self, budget: &mut OpaqueBudget) -> Result<rmpv::Value, WireError> {
        self.read_value_at(budget, 0)
    }

    fn read_value_at(
        &mut self,
        budget: &mut OpaqueBudget,
        depth: usize,
    ) -> Result<rmpv::Value, WireError> {
        use rmpv::Value;
        let offset = self.pos;
        if depth >= budget.max_depth {
            return Err(WireError::TooDeep {
                offset,
                max: budget.max_depth,
            });
        }
        budget.items_left = budget
            .items_left
            .checked_sub(1)
            .ok_or(WireError::TooManyItems {
                offset,
                max: budget.max_items,
            })?;
        let marker = self.peek()?;
        Ok(match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xcf | 0xd0..=0xd3 => {
                let value = self.read_int()?;
                match u64::try_from(value) {
                    Ok(v) => Value::from(v),
                    Err(_) => Value::from(self.narrow_i64(offset, value)?),
                }
            }
            0xc0 => {
                self.pos += 1;
                Value::Nil
            }
            0xc2 | 0xc3 => {
                self.pos += 1;
                Value::Boolean(marker == 0xc3)
            }
            0xca => {
                self.pos += 1;
                Value::F32(f32::from_be_bytes(self.take_array()?))
            }
            0xcb => Value::F64(self.read_f64()?),
            0xa0..=0xbf | 0xd9..=0xdb => Value::from(self.read_str()?),
            0xc4..=0xc6 => Value::Binary(self.read_bin()?.to_vec()),
            0x90..=0x9f | 0xdc | 0xdd => {
                let len = self.read_array_len(budget.items_left)?;
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    items.push(self.read_value_at(budget, depth + 1)?);
                }
                Value::Array(items)
            }
            0x80..=0x8f | 0xde | 0xdf => {
                let len = self.read_map_len(budget.items_left)?;
                let mut entries = Vec::with_capacity(len);
                for _ in 0..len {
                    let key = self.read_value_at(budget, depth + 1)?;
                    let value = self.read_value_at(budget, depth + 1)?;
                    entries.push((key, value));
                }
                Value::Map(entries)
            }
            0xc7..=0xc9 | 0xd4..=0xd8 => {
                self.pos += 1;
                let len = match marker {
                    0xd4..=0xd8 => 1usize << (marker - 0xd4),
                    0xc7 => self.length(1)?,
                    0xc8 => self.length(2)?,
                    _ => self.length(4)?,
                };
                let kind = i8::from_be_bytes(self.take_array()?);
                Value::Ext(kind, self.take(len)?.to_vec())
            }
            0xc1 => return Err(Self::mismatch(offset, "a MessagePack value", marker)),
        })
    }

    /// Skips one value of any type without allocating. Iterative, so deep
    /// nesting cannot exhaust the stack; every container length is bounded by
    /// the bytes left, so the work is linear in the payload size.
    pub fn skip_value(&mut self) -> Result<(), WireError> {
        let mut pending: usize = 1;
        while pending > 0 {
            pending -= 1;
            let marker = self.peek()?;
            match marker {
                0x90..=0x9f | 0xdc | 0xdd => {
                    let len = self.read_array_len(usize::MAX)?;
                    pending = pending.saturating_add(len);
                }
                0x80..=0x8f | 0xde | 0xdf => {
                    let len = self.read_map_len(usize::MAX)?;
                    pending = pending.saturating_add(len.saturating_mul(2));
                }
                _ => self.skip_scalar()?,
            }
        }
        Ok(())
    }

    /// Skips one non-container value, borrowing rather than copying its bytes.
    fn skip_scalar(&mut self) -> Result<(), WireError> {
        let offset = self.pos;
        let marker = self.read_marker()?;
        let body = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
            0xcc | 0xd0 => 1,
            0xcd | 0xd1 => 2,
            0xce | 0xd2 | 0xca => 4,
            0xcf | 0xd3 | 0xcb => 8,
            0xa0..=0xbf => usize::from(marker & 0x1f),
            0xd9 | 0xc4 => self.length(1)?,
            0xda | 0xc5 => self.length(2)?,
            0xdb | 0xc6 => self.length(4)?,
            // Extensions: a type byte plus the data.
            0xd4..=0xd8 => 1 + (1usize << (marker - 0xd4)),
            0xc7 => self.length(1)?.saturating_add(1),
            0xc8 => self.length(2)?.saturating_add(1),
            0xc9 => self.length(4)?.saturating_add(1),
            _ => return Err(Self::mismatch(offset, "a MessagePack scalar", marker)),
        };
        self.take(body).map(|_| ())
    }

    fn narrow_i64(&self, offset: usize, value: i128) -> Result<i64, WireError> {
        i64::try_from(value).map_err(|_| WireError::IntOutOfRange {
            offset,
            value,
            target: "i64",
        })
    }
}
