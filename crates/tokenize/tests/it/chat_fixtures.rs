//! Chat prompts rendered here equal vLLM 0.33's, text and token ids, for
//! every case of `tests/fixtures/qwen3_chat.json` (produced by running vLLM
//! itself, see `scripts/fixtures/README.md`); completions prompts too.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::path::Path;
use std::sync::OnceLock;

use tokenize::chat::{PyValue, RenderedPrompt};
use tokenize::{ChatRenderer, ChatRequest, ModelTokenizer};

fn tokenizer() -> &'static ModelTokenizer {
    static TOK: OnceLock<ModelTokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3");
        ModelTokenizer::from_dir(&dir, 1 << 20).expect("qwen3 tokenizer")
    })
}

fn fixture() -> &'static PyValue {
    static FIX: OnceLock<PyValue> = OnceLock::new();
    FIX.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3_chat.json");
        let text = std::fs::read_to_string(&path).expect("fixture file");
        // Parsed like vLLM parses bodies, so key order and numbers are kept.
        PyValue::parse(&text).expect("fixture JSON")
    })
}

fn cases(kind: &str) -> &'static [PyValue] {
    fixture()
        .get(kind)
        .and_then(PyValue::as_list)
        .expect("case list")
}

fn str_field<'a>(case: &'a PyValue, key: &str) -> &'a str {
    case.get(key)
        .and_then(PyValue::as_str)
        .unwrap_or_else(|| panic!("{key}"))
}

fn ids_field(case: &PyValue, key: &str) -> Vec<u32> {
    case.get(key)
        .and_then(PyValue::as_list)
        .expect("ids")
        .iter()
        .map(|v| v.as_i128().and_then(|i| u32::try_from(i).ok()).expect("id"))
        .collect()
}

/// Where two texts first differ, with some context on both sides.
fn text_diff(want: &str, got: &str) -> String {
    let at = want
        .char_indices()
        .zip(got.chars())
        .find(|((_, a), b)| a != b)
        .map(|((i, _), _)| i)
        .unwrap_or_else(|| want.len().min(got.len()));
    let from = want[..at]
        .char_indices()
        .rev()
        .nth(60)
        .map_or(0, |(i, _)| i);
    let tail = |s: &str| {
        s.get(at..)
            .unwrap_or("")
            .chars()
            .take(80)
            .collect::<String>()
    };
    format!(
        "first difference at byte {at}\n  common: {:?}\n  want:   {:?}\n  got:    {:?}",
        &want[from..at],
        tail(want),
        tail(got)
    )
}

fn ids_diff(want: &[u32], got: &[u32]) -> String {
    let at = want
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| want.len().min(got.len()));
    let show = |ids: &[u32]| {
        let end = (at + 8).min(ids.len());
        let window = &ids[at.min(end)..end];
        format!(
            "{window:?} = {:?}",
            tokenizer().decode(window).unwrap_or_default()
        )
    };
    format!(
        "lengths {} vs {}, first difference at index {at}\n  want: {}\n  got:  {}",
        want.len(),
        got.len(),
        show(want),
        show(got)
    )
}

#[test]
fn every_chat_case_matches_vllm() {
    let renderer = ChatRenderer::new(tokenizer().clone()).expect("renderer");
    let all = cases("chat");
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in all {
        let name = str_field(case, "name");
        let want_text = str_field(case, "prompt_text");
        let want_ids = ids_field(case, "token_ids");
        let request = ChatRequest::from_py_value(case.get("request").expect("request").clone());
        let rendered = request
            .map_err(|e| e.to_string())
            .and_then(|r| renderer.render(&r).map_err(|e| e.to_string()));
        checked += 1;
        match rendered {
            Err(e) => failures.push(format!("{name}: render failed: {e}")),
            Ok(RenderedPrompt { text, token_ids }) => {
                if text != want_text {
                    failures.push(format!(
                        "{name}: prompt text differs: {}",
                        text_diff(want_text, &text)
                    ));
                } else if token_ids != want_ids {
                    failures.push(format!(
                        "{name}: token ids differ: {}",
                        ids_diff(&want_ids, &token_ids)
                    ));
                }
            }
        }
    }
    assert_eq!(checked, 67, "the fixture should hold 67 chat cases");
    assert_eq!(checked, all.len());
    assert!(
        failures.is_empty(),
        "{} of {checked} cases differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_completions_case_matches_vllm() {
    let all = cases("completions");
    assert_eq!(
        all.len(),
        11,
        "the fixture should hold 11 completions cases"
    );
    for case in all {
        let name = str_field(case, "name");
        let add_special = !matches!(case.get("add_special_tokens"), Some(PyValue::Bool(false)));
        let got = tokenizer()
            .encode(str_field(case, "prompt"), add_special)
            .expect("encode");
        let want = ids_field(case, "token_ids");
        assert!(got == want, "{name}: {}", ids_diff(&want, &got));
    }
}

#[test]
fn renderer_is_shareable_across_tasks() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ChatRenderer>();
}

#[test]
fn bad_requests_and_unreproducible_ones_are_told_apart() {
    use tokenize::ChatError;
    use tokenize::chat::UnsupportedReason;

    let renderer = ChatRenderer::new(tokenizer().clone()).expect("renderer");
    let image = br#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}"#;
    assert!(matches!(
        renderer.render_json(image),
        Err(ChatError::Unsupported {
            reason: UnsupportedReason::MediaContent,
            ..
        })
    ));
    let args_object = br#"{"messages": [{"role": "user", "content": "x"}, {"role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]}"#;
    let err = renderer
        .render_json(args_object)
        .expect_err("object arguments");
    assert!(err.is_client_error(), "{err}");
    for bad in [
        &b"{"[..],
        b"[]",
        br#"{"messages": []}"#,
        br#"{"messages": [{"role": "user", "content": null}]}"#,
    ] {
        let err = renderer.render_json(bad).expect_err("invalid");
        assert!(
            err.is_client_error(),
            "{}: {err}",
            String::from_utf8_lossy(bad)
        );
    }
    let ok = renderer
        .render_json(br#"{"model": "qwen3", "messages": [{"role": "user", "content": "Hello!"}], "stream": true}"#)
        .expect("render");
    assert_eq!(
        ok.text,
        "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn named_templates_and_server_options() {
    use tokenize::ChatRendererOptions;

    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        shared.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .expect("copy");
    let config = r#"{"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}, "bos_token": null,
        "chat_template": [
            {"name": "default", "template": "D{{ messages|length }}{{ pad_token }}"},
            {"name": "tool_use", "template": "T{{ tools|length if tools else 0 }}"}]}"#;
    std::fs::write(dir.path().join("tokenizer_config.json"), config).expect("write");
    let tok = ModelTokenizer::from_dir(dir.path(), 1 << 16).expect("tokenizer");
    let specials =
        ChatRendererOptions::special_tokens_from_config(&dir.path().join("tokenizer_config.json"))
            .expect("specials");
    assert_eq!(
        specials,
        [
            ("eos_token".to_owned(), "<|im_end|>".to_owned()),
            ("pad_token".to_owned(), "<|endoftext|>".to_owned())
        ]
    );
    let options = ChatRendererOptions {
        special_tokens: Some(specials),
        ..ChatRendererOptions::default()
    };
    let renderer = ChatRenderer::with_options(tok.clone(), options.clone()).expect("renderer");
    let plain = br#"{"messages": [{"role": "user", "content": "a"}]}"#;
    let tools = br#"{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function", "function": {"name": "f"}}]}"#;
    assert_eq!(
        renderer.render_json(plain).expect("default").text,
        "D1<|endoftext|>"
    );
    assert_eq!(renderer.render_json(tools).expect("tool_use").text, "T1");

    // Without the pad token's text the template's output is unknown.
    let bare = ChatRenderer::new(tok.clone()).expect("renderer");
    assert!(matches!(
        bare.render_json(plain),
        Err(tokenize::ChatError::Unsupported { .. })
    ));

    // `--chat-template` naming a template, or giving one.
    let by_name = ChatRendererOptions {
        chat_template: Some("tool_use".into()),
        ..options.clone()
    };
    let renderer = ChatRenderer::with_options(tok.clone(), by_name).expect("renderer");
    assert_eq!(renderer.render_json(plain).expect("named").text, "T0");
    let literal = ChatRendererOptions {
        chat_template: Some("L{{ messages[0].content }}".into()),
        ..options
    };
    let renderer = ChatRenderer::with_options(tok, literal).expect("renderer");
    assert_eq!(renderer.render_json(plain).expect("literal").text, "La");
}
