//! [`LongTokens`]: a tighter lower bound on a text's tokens than its bytes
//! over the vocabulary's longest token, found without tokenizing.
//!
//! For byte-level BPE every token's bytes occur in the text as they are,
//! so a text has at least `bytes / L` tokens when `L` is the longest token
//! that occurs in it. The longest tokens of a vocabulary are rare runs
//! (Qwen3's: 128 spaces, `//----…`): when none of the tokens longer than
//! [`SHORT_TOKEN_BYTES`] occurs in the text (one Aho-Corasick pass), the
//! bound divides by that instead. A 10.5 MB prompt against a limit of
//! 131,072 tokens is then refused from its length, where the vocabulary's
//! 128-byte tokens allowed up to 16.8 MB.

use aho_corasick::AhoCorasick;

pub use tokenizer_json::SHORT_TOKEN_BYTES;

/// The vocabulary's tokens longer than [`SHORT_TOKEN_BYTES`], as the bytes
/// they stand for.
pub struct LongTokens {
    automaton: Option<AhoCorasick>,
}

impl LongTokens {
    /// From a byte-level vocabulary's keys (each byte spelled as one
    /// character, GPT-2's `bytes_to_unicode`; added tokens as their text).
    pub fn new<'a>(vocab: impl Iterator<Item = &'a str>) -> LongTokens {
        let patterns: Vec<Vec<u8>> = vocab
            .filter(|k| k.chars().count() > SHORT_TOKEN_BYTES)
            .map(token_bytes)
            .collect();
        LongTokens {
            automaton: if patterns.is_empty() {
                None
            } else {
                AhoCorasick::new(&patterns).ok()
            },
        }
    }

    /// Whether `text` may hold a token longer than [`SHORT_TOKEN_BYTES`]
    /// (true when the automaton could not be built: no tighter bound).
    pub fn may_occur_in(&self, text: &str) -> bool {
        match &self.automaton {
            Some(a) => a.is_match(text),
            None => false,
        }
    }
}

/// The bytes a byte-level vocabulary key stands for: GPT-2's printable
/// bytes are themselves, the others were shifted to U+0100 and up, in
/// order; any other character (an added token's) is its UTF-8.
fn token_bytes(key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len());
    for c in key.chars() {
        match byte_of(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

fn printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

fn byte_of(c: char) -> Option<u8> {
    let code = u32::from(c);
    if let Ok(b) = u8::try_from(code)
        && printable(b)
    {
        return Some(b);
    }
    let shifted = usize::try_from(code.checked_sub(256)?).ok()?;
    (0..=255u8).filter(|b| !printable(*b)).nth(shifted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode_to_their_bytes() {
        assert_eq!(token_bytes("Ġhello"), b" hello");
        assert_eq!(token_bytes("Ċ"), b"\n");
        assert_eq!(token_bytes("<|im_start|>"), b"<|im_start|>");
        assert_eq!(token_bytes("Ã©"), "é".as_bytes());
    }

    #[test]
    fn only_texts_holding_a_long_token_may_hold_one() {
        let spaces = "Ġ".repeat(40);
        let long = LongTokens::new([spaces.as_str(), "Ġhello", "world"].into_iter());
        assert!(!long.may_occur_in(&"hello ".repeat(1000)));
        assert!(long.may_occur_in(&format!("a{}b", " ".repeat(45))));
        let none = LongTokens::new(["Ġhello"].into_iter());
        assert!(!none.may_occur_in(&" ".repeat(100)));
    }
}
