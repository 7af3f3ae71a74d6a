#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use super::*;

/// A one-word tokenizer with this normalizer and pre-tokenizer (JSON).
fn tokenizer(normalizer: &str, pre_tokenizer: &str) -> Tokenizer {
    let json = format!(
        r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
        "normalizer":{normalizer},"pre_tokenizer":{pre_tokenizer},
        "post_processor":null,"decoder":null,
        "model":{{"type":"WordLevel","vocab":{{"a":0,"[UNK]":1}},"unk_token":"[UNK]"}}}}"#
    );
    crate::load_tokenizer(json.as_bytes()).unwrap().tokenizer
}

#[test]
fn the_shared_qwen3_tokenizer_is_chunked() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3");
    let tok = ModelTokenizer::from_dir(&dir, 1 << 20).unwrap();
    assert!(tok.inner.file.chunkable);
    // A second tokenizer of the same file, while the first is in use,
    // shares its loaded file but has a chunk cache of its own.
    let other = ModelTokenizer::from_dir(&dir, 1 << 10).unwrap();
    assert!(Arc::ptr_eq(&tok.inner.file, &other.inner.file));
    assert!(!Arc::ptr_eq(&tok.inner, &other.inner));
    let text = "Hello, world. ".repeat(200);
    assert_eq!(
        tok.encode(&text, true).unwrap(),
        other.encode(&text, true).unwrap()
    );
}

const BYTE_LEVEL: &str =
    r#"{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}"#;

#[test]
fn only_byte_level_without_added_text_is_chunked() {
    assert!(is_byte_level(&tokenizer("null", BYTE_LEVEL)));
    let seq = format!(r#"{{"type":"Sequence","pretokenizers":[{BYTE_LEVEL}]}}"#);
    assert!(is_byte_level(&tokenizer("null", &seq)));
    assert!(is_byte_level(&tokenizer(r#"{"type":"NFC"}"#, BYTE_LEVEL)));

    assert!(!is_byte_level(&tokenizer("null", "null")));
    let metaspace =
        r#"{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}"#;
    assert!(!is_byte_level(&tokenizer("null", metaspace)));
    let both = format!(r#"{{"type":"Sequence","pretokenizers":[{BYTE_LEVEL},{metaspace}]}}"#);
    assert!(!is_byte_level(&tokenizer("null", &both)));
    let prepend = r#"{"type":"Prepend","prepend":"▁"}"#;
    assert!(!is_byte_level(&tokenizer(prepend, BYTE_LEVEL)));
    let replace = r#"{"type":"Sequence","normalizers":[{"type":"Replace","pattern":{"String":" "},"content":"▁"}]}"#;
    assert!(!is_byte_level(&tokenizer(replace, BYTE_LEVEL)));
}

#[test]
fn the_shape_read_while_loading_is_the_whole_vocabularys() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/tokenizers/qwen3/tokenizer.json");
    let loaded = crate::load_tokenizer(&std::fs::read(path).unwrap()).unwrap();
    assert!(loaded.fast);
    let vocab = loaded.tokenizer.get_vocab(true);
    let whole = tokenizer_json::VocabShape::of(vocab.keys().map(String::as_str));
    assert_eq!(loaded.shape.longest_chars, whole.longest_chars);
    assert!(whole.longest_chars > crate::long_tokens::SHORT_TOKEN_BYTES);
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert!(!whole.long.is_empty());
    assert_eq!(sorted(loaded.shape.long), sorted(whole.long));
}
