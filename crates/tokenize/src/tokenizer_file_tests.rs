#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use super::*;

/// A word-level `tokenizer.json` of `words` (ids in order) and `[UNK]`.
/// Each test uses its own words: the tests of this binary share the
/// process, and so the list of loaded files.
fn word_level(words: &[&str]) -> String {
    let vocab: Vec<String> = words
        .iter()
        .chain(&["[UNK]"])
        .enumerate()
        .map(|(id, w)| format!("{w:?}:{id}"))
        .collect();
    format!(
        r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
        "normalizer":null,"pre_tokenizer":{{"type":"Whitespace"}},
        "post_processor":null,"decoder":null,
        "model":{{"type":"WordLevel","vocab":{{{}}},"unk_token":"[UNK]"}}}}"#,
        vocab.join(",")
    )
}

#[test]
fn the_same_bytes_load_once_while_in_use_and_changed_bytes_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, word_level(&["apple", "pear"])).unwrap();
    let first = TokenizerFile::load(&path).unwrap();
    let again = TokenizerFile::load(&path).unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    // The same bytes under another name are the same tokenizer.
    let copy = dir.path().join("copy.json");
    std::fs::copy(&path, &copy).unwrap();
    assert!(Arc::ptr_eq(&first, &TokenizerFile::load(&copy).unwrap()));
    // Other bytes of the same length, in the same file: read again.
    std::fs::write(&path, word_level(&["apple", "plum"])).unwrap();
    let changed = TokenizerFile::load(&path).unwrap();
    assert!(!Arc::ptr_eq(&first, &changed));
    assert_eq!(changed.tokenizer.token_to_id("plum"), Some(1));
    assert_eq!(first.tokenizer.token_to_id("plum"), None);
    assert_eq!(first.tokenizer.token_to_id("pear"), Some(1));
}

#[test]
fn a_tokenizer_no_one_uses_is_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, word_level(&["cherry", "fig"])).unwrap();
    let first = TokenizerFile::load(&path).unwrap();
    let weak = Arc::downgrade(&first);
    drop(first);
    assert!(weak.upgrade().is_none());
    let again = TokenizerFile::load(&path).unwrap();
    assert_eq!(Arc::strong_count(&again), 1);
    assert_eq!(again.tokenizer.token_to_id("fig"), Some(1));
}

#[test]
fn a_failed_load_is_an_error_each_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, "{\"version\": \"1.0\"").unwrap();
    for _ in 0..2 {
        assert!(matches!(
            TokenizerFile::load(&path),
            Err(TokenizeError::Tokenizer(_))
        ));
    }
    assert!(matches!(
        TokenizerFile::load(&dir.path().join("missing.json")),
        Err(TokenizeError::Read { .. })
    ));
}
