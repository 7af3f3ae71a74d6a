//! [`VocabShape`]: what a vocabulary's keys say about token lengths, read
//! while the tokenizer loads.

/// Tokens at most this long count as short.
pub const SHORT_TOKEN_BYTES: usize = 32;

/// What a vocabulary's keys say about token lengths, read once while the
/// tokenizer loads (not from a copy of the whole vocabulary afterwards).
pub struct VocabShape {
    /// The most characters of any key (at least 1).
    pub longest_chars: usize,
    /// The keys longer than [`SHORT_TOKEN_BYTES`] characters.
    pub long: Vec<String>,
}

impl VocabShape {
    /// The shape of these keys (the model's and the added tokens').
    pub fn of<'a>(keys: impl Iterator<Item = &'a str>) -> VocabShape {
        let mut shape = VocabShape {
            longest_chars: 1,
            long: Vec::new(),
        };
        for key in keys {
            // A key has at most as many characters as bytes: one no longer
            // than the longest so far nor long is not counted (most keys).
            if key.len() <= shape.longest_chars.min(SHORT_TOKEN_BYTES) {
                continue;
            }
            let chars = key.chars().count();
            shape.longest_chars = shape.longest_chars.max(chars);
            if chars > SHORT_TOKEN_BYTES {
                shape.long.push(key.to_owned());
            }
        }
        shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_counts_characters() {
        let spaces = "Ġ".repeat(40);
        for keys in [
            ["a", "abcdefghij", "ĠĠĠ", spaces.as_str()],
            [spaces.as_str(), "ĠĠĠ", "abcdefghij", "a"],
        ] {
            let shape = VocabShape::of(keys.into_iter());
            assert_eq!(shape.longest_chars, 40);
            assert_eq!(shape.long, vec![spaces.clone()]);
        }
        let short = VocabShape::of(["ab", "ĠĠĠ", "abcdefghij"].into_iter());
        assert_eq!(short.longest_chars, 10);
        assert!(short.long.is_empty());
        assert_eq!(VocabShape::of(std::iter::empty()).longest_chars, 1);
    }
}
