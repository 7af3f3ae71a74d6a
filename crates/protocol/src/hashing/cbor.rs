//! A minimal canonical CBOR (RFC 8949) encoder for the values vLLM hashes.
//!
//! vLLM's `sha256_cbor` prefix-cache hash is SHA-256 over
//! `cbor2.dumps(x, canonical=True)`. The values it hashes are built from only
//! a few shapes: byte strings (digests), text strings (seeds, LoRA names,
//! salts, multimodal identifiers), integers (token ids, offsets), arrays
//! (Python tuples) and null (`None`). This module encodes exactly those, and
//! nothing else, so the block hasher needs no CBOR dependency.
//!
//! "Canonical" here means what cbor2 does for these shapes: every length or
//! integer argument uses the shortest head (RFC 8949 §4.2.1 "preferred
//! serialization"), lengths are always definite, and no tags are written.
//! Maps and floats, whose canonical forms need more rules, are deliberately
//! not supported.
//!
//! The functions append to a caller-owned `Vec<u8>`, so a hasher can reuse
//! one buffer for every block instead of building a value tree.

/// Major type 0: unsigned integer.
const MAJOR_UNSIGNED: u8 = 0;
/// Major type 1: negative integer, encoded as `-1 - n`.
const MAJOR_NEGATIVE: u8 = 1;
/// Major type 2: byte string.
const MAJOR_BYTES: u8 = 2;
/// Major type 3: UTF-8 text string.
const MAJOR_TEXT: u8 = 3;
/// Major type 4: array of data items.
const MAJOR_ARRAY: u8 = 4;
/// Simple value 22 (`null`), the encoding of Python's `None`.
const NULL: u8 = 0xf6;

/// Writes a data item head: major type `major` with argument `arg`, in the
/// shortest form. This one rule is what makes the output canonical.
fn write_head(out: &mut Vec<u8>, major: u8, arg: u64) {
    let mt = major << 5;
    if arg < 24 {
        // Fits in the 5 low bits of the initial byte; `arg < 24` so the cast
        // is exact.
        out.push(mt | arg as u8);
    } else if let Ok(v) = u8::try_from(arg) {
        out.push(mt | 24);
        out.push(v);
    } else if let Ok(v) = u16::try_from(arg) {
        out.push(mt | 25);
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = u32::try_from(arg) {
        out.push(mt | 26);
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(mt | 27);
        out.extend_from_slice(&arg.to_be_bytes());
    }
}

/// Appends an unsigned integer (major type 0), e.g. a token id.
pub fn write_uint(out: &mut Vec<u8>, n: u64) {
    write_head(out, MAJOR_UNSIGNED, n);
}

/// Appends the negative integer `-1 - n` (major type 1).
///
/// Taking the CBOR argument `n` directly covers the whole CBOR negative range
/// (down to `-2^64`) without a wider integer type; see [`write_int`] for the
/// usual signed entry point.
pub fn write_negative(out: &mut Vec<u8>, n: u64) {
    write_head(out, MAJOR_NEGATIVE, n);
}

/// Appends a signed integer: major type 0 if it is non-negative, else 1.
pub fn write_int(out: &mut Vec<u8>, v: i64) {
    match u64::try_from(v) {
        Ok(n) => write_uint(out, n),
        // For v < 0, -1 - v is in 0..=i64::MAX, and !v computes it exactly.
        Err(_) => write_negative(out, !v as u64),
    }
}

/// Appends a byte string (major type 2), e.g. a parent block digest.
pub fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    write_head(out, MAJOR_BYTES, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends a text string (major type 3), which is how cbor2 encodes a
/// Python `str`.
pub fn write_text(out: &mut Vec<u8>, text: &str) {
    write_head(out, MAJOR_TEXT, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// Appends the head of a definite-length array (major type 4) of `len`
/// items; the caller then writes exactly `len` items. cbor2 encodes a Python
/// tuple this way.
pub fn write_array_header(out: &mut Vec<u8>, len: usize) {
    write_head(out, MAJOR_ARRAY, len as u64);
}

/// Appends `null`, cbor2's encoding of Python's `None`.
pub fn write_null(out: &mut Vec<u8>) {
    out.push(NULL);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uint(n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        write_uint(&mut out, n);
        out
    }

    fn int(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        write_int(&mut out, v);
        out
    }

    #[test]
    fn unsigned_integers_use_the_shortest_head_at_every_width_boundary() {
        let cases: [(u64, &str); 13] = [
            (0, "00"),
            (23, "17"),
            (24, "1818"),
            (255, "18ff"),
            (256, "190100"),
            (65535, "19ffff"),
            (65536, "1a00010000"),
            (16_777_216, "1a01000000"),
            (u64::from(u32::MAX), "1affffffff"),
            (1 << 32, "1b0000000100000000"),
            (u64::MAX, "1bffffffffffffffff"),
            (128_000, "1a0001f400"),
            (9906, "1926b2"),
        ];
        for (n, want) in cases {
            assert_eq!(hex::encode(uint(n)), want, "{n}");
        }
    }

    #[test]
    fn negative_integers_encode_minus_one_minus_n() {
        let cases: [(i64, &str); 9] = [
            (-1, "20"),
            (-12, "2b"),
            (-24, "37"),
            (-25, "3818"),
            (-256, "38ff"),
            (-257, "390100"),
            (-65537, "3a00010000"),
            (i64::MIN, "3b7fffffffffffffff"),
            (5, "05"),
        ];
        for (v, want) in cases {
            assert_eq!(hex::encode(int(v)), want, "{v}");
        }
        let mut out = Vec::new();
        write_negative(&mut out, u64::MAX);
        assert_eq!(hex::encode(out), "3bffffffffffffffff");
    }

    #[test]
    fn strings_arrays_and_null() {
        let mut out = Vec::new();
        write_text(&mut out, "0");
        assert_eq!(hex::encode(&out), "6130");

        out.clear();
        write_text(&mut out, "");
        assert_eq!(hex::encode(&out), "60");

        out.clear();
        write_text(&mut out, "vllm-none-hash");
        assert_eq!(hex::encode(&out), "6e766c6c6d2d6e6f6e652d68617368");

        out.clear();
        write_text(&mut out, &"a".repeat(24));
        assert_eq!(hex::encode(&out[..2]), "7818");
        assert_eq!(out.len(), 26);

        out.clear();
        write_bytes(&mut out, &[0xab; 32]);
        assert_eq!(hex::encode(&out[..2]), "5820");
        assert_eq!(out.len(), 34);

        out.clear();
        write_bytes(&mut out, &[]);
        assert_eq!(hex::encode(&out), "40");

        out.clear();
        write_array_header(&mut out, 3);
        write_array_header(&mut out, 0);
        write_null(&mut out);
        write_int(&mut out, -1);
        assert_eq!(hex::encode(&out), "8380f620");

        out.clear();
        write_array_header(&mut out, 16);
        write_array_header(&mut out, 24);
        write_array_header(&mut out, 256);
        assert_eq!(hex::encode(&out), "909818990100");
    }
}
