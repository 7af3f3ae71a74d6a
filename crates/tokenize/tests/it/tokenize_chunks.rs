//! The cached, chunked tokenization gives exactly the plain tokenizer's ids
//! (real Qwen3 tokenizer, varied text).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use tokenize::ModelTokenizer;

fn qwen3(chunk_bytes: usize) -> ModelTokenizer {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3");
    ModelTokenizer::from_dir_with_chunks(&dir, 1 << 20, chunk_bytes).expect("qwen3 tokenizer")
}

/// Chunk sizes from "cut at every safe boundary" to "rarely cut", loaded once.
const CHUNK_SIZES: [usize; 4] = [1, 5, 24, 96];

fn tokenizers() -> &'static Vec<ModelTokenizer> {
    static ALL: OnceLock<Vec<ModelTokenizer>> = OnceLock::new();
    ALL.get_or_init(|| CHUNK_SIZES.iter().map(|&n| qwen3(n)).collect())
}

/// Pieces that stress pre-tokenizer boundaries around newlines.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z]{1,12}".prop_map(String::from),
        Just("\n".to_owned()),
        Just("\n\n".to_owned()),
        Just("\r\n".to_owned()),
        Just(" \n".to_owned()),
        Just("\n ".to_owned()),
        Just("\t".to_owned()),
        Just("   ".to_owned()),
        Just(" ".to_owned()),
        "[0-9]{1,6}".prop_map(String::from),
        "[!-/:-@\\[-`{-~]{1,4}".prop_map(String::from),
        Just("'s".to_owned()),
        Just("'LL".to_owned()),
        Just("日本語のテキスト".to_owned()),
        Just("中文".to_owned()),
        Just("🙂👍🏽".to_owned()),
        Just("e\u{301}".to_owned()),
        Just("\u{301}".to_owned()),
        Just("\u{0308}a".to_owned()),
        Just("<|im_start|>".to_owned()),
        Just("<|im_end|>\n".to_owned()),
        Just("<|endoftext|>".to_owned()),
        Just("fn main() {\n    println!(\"hi\");\n}\n".to_owned()),
        Just("    ".to_owned()),
        "\\PC{1,8}".prop_map(String::from),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..80).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn chunked_ids_equal_plain_ids(t in text(), which in 0..CHUNK_SIZES.len(), special in any::<bool>()) {
        let tok = &tokenizers()[which];
        let plain = tok.encode_plain(&t, special).unwrap();
        prop_assert_eq!(&tok.encode(&t, special).unwrap(), &plain, "first pass");
        // The second pass is served from the cache.
        prop_assert_eq!(&tok.encode(&t, special).unwrap(), &plain, "cached pass");
    }
}

#[test]
fn a_repeated_long_prefix_is_served_from_the_cache() {
    let tok = qwen3(256);
    let system = "You are a helpful assistant.\n".repeat(200);
    let a = format!("{system}Question one?\n");
    let b = format!("{system}Another question\n");
    for t in [&a, &b, &a] {
        assert_eq!(
            tok.encode(t, false).unwrap(),
            tok.encode_plain(t, false).unwrap()
        );
    }
}

/// A text over the limit is refused after about the limit's worth of work:
/// the count where the encoder stopped is far below the text's real count,
/// and within the limit the ids are exactly `encode`'s.
#[test]
fn a_bounded_encode_stops_early_and_is_exact_within_the_limit() {
    let tok = qwen3(4096);
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(20_000);
    let all = tok.encode(&text, true).unwrap();
    assert!(all.len() > 150_000, "{}", all.len());
    match tok.encode_bounded(&text, true, 1_000) {
        Err(tokenize::TokenizeError::TooLong { at_least, max }) => {
            assert_eq!(max, 1_000);
            assert!(at_least > 1_000, "{at_least}");
            assert!(
                at_least < 10_000,
                "tokenized {at_least} of {} tokens",
                all.len()
            );
        }
        other => panic!("expected TooLong, got {:?}", other.map(|v| v.len())),
    }
    assert_eq!(tok.encode_bounded(&text, true, all.len()).unwrap(), all);
    assert!(tok.encode_bounded(&text, true, all.len() - 1).is_err());
    // The length alone bounds the count from below (byte-level BPE): no
    // token is longer than the vocabulary's longest entry.
    let floor = tok.min_tokens(text.len());
    assert!(floor >= 1 && floor <= all.len(), "{floor} vs {}", all.len());
    match tok.encode_bounded(&text, true, floor - 1) {
        Err(tokenize::TokenizeError::TooLong { at_least, .. }) => assert_eq!(at_least, floor),
        other => panic!("expected TooLong, got {:?}", other.map(|v| v.len())),
    }
}

/// Words, spaces and punctuation on one line: text a long chunk is cut in
/// (`split_long`), before spaces between letters.
fn line() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-zA-Z]{1,12}".prop_map(String::from),
        Just(" ".to_owned()),
        Just("  ".to_owned()),
        Just("\t".to_owned()),
        "[0-9]{1,6}".prop_map(String::from),
        "[!-/:-@\\[-`{-~]{1,4}".prop_map(String::from),
        Just("'s".to_owned()),
        Just("e\u{301}".to_owned()),
        Just("日本語".to_owned()),
        Just("<|im_end|>".to_owned()),
    ];
    prop::collection::vec(piece, 0..120).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// A cut `split_long` calls exact is: the pieces' ids, concatenated,
    /// are the whole line's.
    #[test]
    fn exact_cuts_of_a_long_line_keep_the_ids(t in line(), max in 8usize..64) {
        let tok = &tokenizers()[0];
        let plain = tok.encode_plain(&t, false).unwrap();
        let pieces: Vec<(&str, bool)> = tokenize::split_long(&t, max, true).collect();
        prop_assert_eq!(pieces.iter().map(|p| p.0).collect::<String>(), t.clone());
        if pieces.iter().all(|p| p.1) {
            let mut ids = Vec::new();
            for (p, _) in &pieces {
                ids.extend(tok.encode_plain(p, false).unwrap());
            }
            prop_assert_eq!(ids, plain);
        }
    }
}

/// A long prompt on one line (no newline to cut at) is tokenized in pieces
/// and its ids are still exactly the plain tokenizer's.
#[test]
fn a_long_line_of_prose_is_tokenized_in_pieces_exactly() {
    let tok = qwen3(256);
    let text = "The quick brown fox jumps over the lazy dog, again and again. ".repeat(3_000);
    assert!(text.len() > 2 * tokenize::MAX_PIECE_BYTES);
    assert_eq!(
        tok.encode(&text, true).unwrap(),
        tok.encode_plain(&text, true).unwrap()
    );
}
