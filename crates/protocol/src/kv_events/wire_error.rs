//! [`WireError`]: what can be wrong with one MessagePack item of an
//! untrusted payload, located by byte offset so that a bad frame from an
//! engine can be found in a capture.

use thiserror::Error;

/// A malformed or over-limit MessagePack item, with the byte offset where it
/// starts, so that a bad frame from an engine can be located in a capture.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The payload ends in the middle of an item.
    #[error("payload ends at byte {offset}: {needed} more byte(s) needed")]
    Truncated {
        /// Where the missing bytes should have started.
        offset: usize,
        /// How many bytes were missing.
        needed: usize,
    },
    /// The item has a different MessagePack type than the schema requires.
    #[error("expected {expected} at byte {offset}, found {found}")]
    UnexpectedType {
        /// Where the item starts.
        offset: usize,
        /// What the schema requires there.
        expected: &'static str,
        /// What the marker byte says is there.
        found: &'static str,
    },
    /// An integer that does not fit the field's range (for example a negative
    /// token id).
    #[error("integer {value} at byte {offset} is out of range for {target}")]
    IntOutOfRange {
        /// Where the integer starts.
        offset: usize,
        /// The value that was read.
        value: i128,
        /// The Rust type it had to fit.
        target: &'static str,
    },
    /// A string that is not valid UTF-8.
    #[error("string at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Where the string's bytes start.
        offset: usize,
    },
    /// A container that claims more elements than a limit (or than the
    /// remaining bytes could possibly hold).
    #[error("{what} at byte {offset} claims {len} elements; the limit is {max}")]
    TooLong {
        /// Where the container header starts.
        offset: usize,
        /// Array or map.
        what: &'static str,
        /// The claimed length.
        len: usize,
        /// The limit that was exceeded.
        max: usize,
    },
    /// Opaque values nested deeper than the decoder allows.
    #[error("value at byte {offset} is nested deeper than {max} levels")]
    TooDeep {
        /// Where the too-deep item starts.
        offset: usize,
        /// The depth limit.
        max: usize,
    },
    /// Opaque values (extra keys, unknown fields) hold more items in total
    /// than the decoder allows for one payload.
    #[error("opaque values exceed {max} items in total (at byte {offset})")]
    TooManyItems {
        /// Where the item that went over the budget starts.
        offset: usize,
        /// The budget.
        max: usize,
    },
}
