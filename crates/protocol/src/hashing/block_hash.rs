//! [`BlockHash`]: one KV-cache block's identity, as vLLM publishes it.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// vLLM's external block hash: the last 8 bytes of the block digest, read
/// big-endian. Written as 16 lower-case hex digits in Valkey and JSON output.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u64);

/// A block hash that is neither a u64 nor exactly 16 hex digits.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("block hash must be an unsigned 64-bit integer or 16 hex digits, got {0:?}")]
pub struct ParseBlockHashError(pub String);

impl BlockHash {
    /// The canonical text form used in keys: 16 lower-case hex digits.
    pub fn to_hex(self) -> String {
        format!("{:016x}", self.0)
    }
}

impl fmt::Display for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlockHash({:016x})", self.0)
    }
}

impl FromStr for BlockHash {
    type Err = ParseBlockHashError;

    /// Accepts exactly 16 hex digits, either case (no prefix, no sign).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ParseBlockHashError(truncate(s)));
        }
        u64::from_str_radix(s, 16)
            .map(BlockHash)
            .map_err(|_| ParseBlockHashError(truncate(s)))
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

impl Serialize for BlockHash {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BlockHash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BlockHashVisitor)
    }
}

struct BlockHashVisitor;

impl Visitor<'_> for BlockHashVisitor {
    type Value = BlockHash;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an unsigned 64-bit integer or a string of 16 hex digits")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<BlockHash, E> {
        Ok(BlockHash(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<BlockHash, E> {
        u64::try_from(v)
            .map(BlockHash)
            .map_err(|_| E::custom(format!("block hash must not be negative, got {v}")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<BlockHash, E> {
        Err(E::custom(format!("block hash must be an integer, got {v}")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<BlockHash, E> {
        v.parse().map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_is_lower_case_and_padded() {
        let h = BlockHash(0x7219_bff9_b083_37ef);
        assert_eq!(h.to_hex(), "7219bff9b08337ef");
        assert_eq!(BlockHash(1).to_hex(), "0000000000000001");
        assert_eq!("7219BFF9B08337EF".parse::<BlockHash>(), Ok(h));
    }

    #[test]
    fn rejects_wrong_lengths_and_non_hex() {
        for bad in [
            "",
            "123",
            "0x7219bff9b08337",
            "7219bff9b08337eg",
            "+219bff9b08337ef",
            "7219bff9b08337ef0",
        ] {
            assert!(bad.parse::<BlockHash>().is_err(), "{bad}");
        }
    }

    #[test]
    fn json_accepts_integers_and_hex_strings_only() {
        let v: Vec<BlockHash> =
            serde_json::from_str(r#"[18446744073709551615, "00000000000000ff", 0]"#).unwrap();
        assert_eq!(v, vec![BlockHash(u64::MAX), BlockHash(255), BlockHash(0)]);
        for bad in [
            r#"[-1]"#,
            r#"[1.5]"#,
            r#"["ff"]"#,
            r#"[18446744073709551616]"#,
            r#"[null]"#,
            r#"[[1]]"#,
        ] {
            assert!(
                serde_json::from_str::<Vec<BlockHash>>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
