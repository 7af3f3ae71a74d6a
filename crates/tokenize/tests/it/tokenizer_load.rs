//! `load_tokenizer` gives the tokenizer `tokenizers` builds from the same
//! file: the fast read for the real Qwen3 `tokenizer.json` (vocabulary,
//! added tokens, sizes, encodings, decoding all equal), the plain load for
//! files of other shapes, and a clear error for malformed ones.

use std::path::Path;

use tokenize::{LoadedTokenizer, load_tokenizer};
use tokenizers::Tokenizer;

fn qwen3_bytes() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/tokenizers/qwen3/tokenizer.json");
    std::fs::read(path).expect("qwen3 tokenizer.json")
}

/// Texts whose ids must not depend on how the tokenizer was loaded.
fn corpus() -> Vec<String> {
    let mut texts: Vec<String> = [
        "",
        "Hello, world!",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|> and <|im_end|>in the middle<|im_start|>",
        "<think>\n\n</think>\n\n<tool_call>{\"a\": 1}</tool_call>",
        "你好，世界。日本語のテキストと한국어 문장도 있습니다。",
        "emoji 👍🏽 🇫🇷 👨‍👩‍👧‍👦 ✨ and a ZWJ",
        "a    b\n\n\n\tc \u{a0} d\r\n   ",
        "                                                                    indented",
        "1234567890 3.14159 -42 1e10 0x1F 2026-11-28 12:00:00",
        "fn main() {\n    println!(\"{}\", 1 + 1);\n}\n",
        "Ġ Ċ ĉ byte-level look-alikes Ã©",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let paragraph = "The quick brown fox jumps over the lazy dog; 素早い茶色の狐 123. ";
    texts.push(paragraph.repeat(400));
    // The chat template's renderings (and completions prompts) vLLM made.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3_chat.json");
    let fixture: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("fixture JSON");
    for (kind, field) in [("chat", "prompt_text"), ("completions", "prompt")] {
        for case in fixture[kind].as_array().expect("cases") {
            if let Some(text) = case[field].as_str() {
                texts.push(text.to_owned());
            }
        }
    }
    texts
}

/// `a` and `b` are the same tokenizer, part by part and on `texts`.
fn assert_same(a: &Tokenizer, b: &Tokenizer, texts: &[String]) {
    assert_eq!(a.get_vocab(true), b.get_vocab(true), "vocabulary");
    assert_eq!(a.get_vocab(false), b.get_vocab(false), "model vocabulary");
    assert_eq!(a.get_vocab_size(true), b.get_vocab_size(true));
    assert_eq!(a.get_vocab_size(false), b.get_vocab_size(false));
    let mut added_a: Vec<_> = a.get_added_tokens_decoder().into_iter().collect();
    let mut added_b: Vec<_> = b.get_added_tokens_decoder().into_iter().collect();
    added_a.sort_by_key(|(id, _)| *id);
    added_b.sort_by_key(|(id, _)| *id);
    assert_eq!(added_a, added_b, "added tokens (id, content, flags)");
    for text in texts {
        for special in [false, true] {
            let ids_a = a.encode(text.as_str(), special).unwrap();
            let ids_b = b.encode(text.as_str(), special).unwrap();
            assert_eq!(ids_a.get_ids(), ids_b.get_ids(), "{special} {text:?}");
            for skip in [false, true] {
                assert_eq!(
                    a.decode(ids_a.get_ids(), skip).unwrap(),
                    b.decode(ids_b.get_ids(), skip).unwrap(),
                    "decode {text:?}"
                );
            }
        }
    }
    // Everything `tokenizers` writes out: normalizer, pre-tokenizer,
    // post-processor, decoder, truncation, padding, merges in rank order.
    assert_eq!(a.to_string(false).unwrap(), b.to_string(false).unwrap());
}

fn load(bytes: &[u8]) -> LoadedTokenizer {
    load_tokenizer(bytes).expect("loads")
}

#[test]
fn qwen3_fast_load_equals_the_plain_load() {
    let bytes = qwen3_bytes();
    let fast = load(&bytes);
    assert!(fast.fast, "the Qwen3 tokenizer is read by the fast path");
    let plain = Tokenizer::from_bytes(&bytes).unwrap();
    assert_eq!(plain.get_vocab_size(true), 151_669);
    assert_same(&fast.tokenizer, &plain, &corpus());
}

/// A small byte-level BPE `tokenizer.json`: `merges` and `added_tokens`
/// as JSON, the rest fixed.
fn tiny_bpe(merges: &str, added: &str) -> String {
    format!(
        r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":{added},
        "normalizer":null,"pre_tokenizer":{{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}},
        "post_processor":{{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":true}},
        "decoder":{{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}},
        "model":{{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,
        "end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
        "vocab":{{"a":0,"b":1,"c":2,"Ġ":3,"ab":4,"abc":5,"Ġa":6}},"merges":{merges}}}}}"#
    )
}

const ADDED: &str = r#"[{"id":7,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
    {"id":8,"content":"<x>","single_word":true,"lstrip":true,"rstrip":false,"normalized":true,"special":false}]"#;

fn tiny_texts() -> Vec<String> {
    ["ab abc", "<s>abc <x> a", "cab<s>", " a  b"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn both_merge_formats_load_fast_and_equal() {
    for merges in [
        r#"["a b","ab c","Ġ a"]"#,
        r##"["#version: 0.2","a b","ab c","Ġ a"]"##,
        r#"[["a","b"],["ab","c"],["Ġ","a"]]"#,
    ] {
        let json = tiny_bpe(merges, ADDED);
        // And every option away from its default (`tokenizers` writes
        // them all out, so `assert_same` compares them).
        let options = json
            .replace(r#""dropout":null"#, r#""dropout":0.0"#)
            .replace(r#""unk_token":null"#, r#""unk_token":"c""#)
            .replace(
                r#""end_of_word_suffix":null"#,
                r#""end_of_word_suffix":"</w>""#,
            )
            .replace(r#""fuse_unk":false"#, r#""fuse_unk":true"#)
            .replace(r#""byte_fallback":false"#, r#""byte_fallback":true"#)
            .replace(r#""ignore_merges":false"#, r#""ignore_merges":true"#);
        for json in [json, options] {
            let fast = load(json.as_bytes());
            assert!(fast.fast, "{json}");
            let plain = Tokenizer::from_bytes(json.as_bytes()).unwrap();
            assert_same(&fast.tokenizer, &plain, &tiny_texts());
        }
    }
}

#[test]
fn other_shapes_take_the_plain_load() {
    // Added token ids that `tokenizers` does not give (a gap after the
    // vocabulary): its load warns and renumbers; so must ours.
    let gap = ADDED.replace(r#""id":7"#, r#""id":9"#);
    let wordpiece = r###"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
        "normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
        "pre_tokenizer":{"type":"BertPreTokenizer"},"post_processor":null,"decoder":null,
        "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,
        "vocab":{"[UNK]":0,"ab":1,"##c":2,"a":3}}}"###;
    for json in [
        tiny_bpe(r#"["a b","ab c","Ġ a"]"#, &gap),
        // Added tokens listed out of id order.
        tiny_bpe(
            r#"["a b","ab c","Ġ a"]"#,
            &format!("[{}]", {
                let v: Vec<serde_json::Value> = serde_json::from_str(ADDED).unwrap();
                format!("{},{}", v[1], v[0])
            }),
        ),
        // No "type": `tokenizers` guesses the model.
        tiny_bpe(r#"["a b","ab c","Ġ a"]"#, ADDED).replace(r#""type":"BPE","#, ""),
        wordpiece.to_owned(),
    ] {
        let loaded = load(json.as_bytes());
        assert!(!loaded.fast, "{json}");
        let plain = Tokenizer::from_bytes(json.as_bytes()).unwrap();
        assert_same(&loaded.tokenizer, &plain, &tiny_texts());
    }
}

#[test]
fn malformed_files_are_clear_errors() {
    let good = tiny_bpe(r#"["a b","ab c","Ġ a"]"#, ADDED);
    let cases = [
        String::new(),
        "not json".to_owned(),
        good[..good.len() / 2].to_owned(),
        good.replace(r#""version":"1.0""#, r#""version":"2.0""#),
        // A merge whose tokens are not in the vocabulary.
        tiny_bpe(r#"["a b","ab z"]"#, ADDED),
        // A merge that is not two tokens, and both formats in one list.
        tiny_bpe(r#"["a b c"]"#, ADDED),
        tiny_bpe(r#"["a b",["ab","c"]]"#, ADDED),
        tiny_bpe(r#"[["a","b","c"]]"#, ADDED),
        // An added token without its flags, a negative id.
        tiny_bpe(r#"["a b"]"#, r#"[{"id":7,"content":"<s>"}]"#),
        good.replace(r#""a":0"#, r#""a":-1"#),
        good.replace(r#""model":"#, r#""extra":1,"model":"#),
    ];
    for json in cases {
        let plain = Tokenizer::from_bytes(json.as_bytes()).map(|_| ());
        match load_tokenizer(json.as_bytes()) {
            Ok(_) => panic!("loaded {json:?}, tokenizers says {plain:?}"),
            Err(e) => {
                assert!(plain.is_err(), "{json}");
                assert!(e.to_string().starts_with("tokenizer: "), "{e}");
            }
        }
    }
}
