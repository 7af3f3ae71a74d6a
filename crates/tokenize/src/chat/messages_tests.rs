//! vLLM's per-message normalization (`chat_message.py`), case by case;
//! expectations were checked against vLLM 0.33.0.

use super::*;
use crate::chat::de::from_value;
use crate::chat::developer::developer_to_system;
use crate::chat::pyjson::loads;

fn message(json: &str) -> ChatMessage {
    from_value(loads(json).expect("json")).expect("message")
}

fn string_form(json: &str) -> Result<PyDict, ChatError> {
    convert(0, &message(json), ContentFormat::String)
}

fn content(json: &str) -> String {
    let m = string_form(json).expect("convert");
    m.get("content")
        .and_then(PyValue::as_str)
        .expect("string content")
        .to_owned()
}

#[test]
fn parts_join_with_newlines_and_drop_empty_ones() {
    let parts = r#"{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": ""},
        {"type": "text", "text": " "}, {"type": "text", "text": null}, {"type": "text"},
        {"type": "refusal", "refusal": "r"}, {"type": "thinking", "thinking": "t"},
        {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]}"#;
    assert_eq!(content(parts), "a\n \nr\nt\nb");
    assert_eq!(content(r#"{"role": "user", "content": []}"#), "");
    assert_eq!(content(r#"{"role": "user"}"#), "");
    assert_eq!(content(r#"{"role": "assistant", "content": null}"#), "");
    assert_eq!(
        content(
            r#"{"role": "tool", "content": [{"type": "text", "text": "x"}, {"type": "tool_reference", "name": "f"}]}"#
        ),
        "x\nf"
    );
}

#[test]
fn null_content_only_for_assistants() {
    for role in ["user", "system", "developer", "tool", "custom"] {
        let err =
            string_form(&format!(r#"{{"role": "{role}", "content": null}}"#)).expect_err(role);
        assert!(err.is_client_error(), "{role}: {err}");
    }
}

#[test]
fn media_is_unsupported_and_bad_parts_are_invalid() {
    let img = r#"{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}"#;
    assert!(matches!(
        string_form(img),
        Err(ChatError::Unsupported {
            reason: UnsupportedReason::MediaContent,
            ..
        })
    ));
    for bad in [
        r#"["plain string part"]"#,
        r#"[{"text": "no type"}]"#,
        r#"[{"type": "input_text", "text": "x"}]"#,
        r#"[{"type": "text", "text": 5}]"#,
        r#"[{"type": "text", "text": "x", "uuid": "u"}]"#,
    ] {
        let json = format!(r#"{{"role": "user", "content": {bad}}}"#);
        assert!(
            string_form(&json).expect_err(bad).is_client_error(),
            "{bad}"
        );
    }
}

#[test]
fn billing_header_line_is_stripped_from_system_text() {
    assert_eq!(
        content(
            r#"{"role": "system", "content": "x-anthropic-billing-header: cch=1\nYou are Claude Code."}"#
        ),
        "You are Claude Code."
    );
    assert_eq!(
        content(r#"{"role": "system", "content": "x-anthropic-billing-header: cch=1"}"#),
        ""
    );
    assert_eq!(
        content(r#"{"role": "user", "content": "x-anthropic-billing-header: a\nb"}"#),
        "x-anthropic-billing-header: a\nb"
    );
}

#[test]
fn reasoning_is_copied_twice_and_reasoning_wins() {
    let m = string_form(
        r#"{"role": "assistant", "content": "a", "reasoning": "r", "reasoning_content": "rc"}"#,
    )
    .expect("convert");
    assert_eq!(m.get("reasoning").and_then(PyValue::as_str), Some("r"));
    assert_eq!(
        m.get("reasoning_content").and_then(PyValue::as_str),
        Some("r")
    );
    let m = string_form(
        r#"{"role": "assistant", "content": "a", "reasoning": null, "reasoning_content": "rc"}"#,
    )
    .expect("convert");
    assert_eq!(
        m.get("reasoning_content").and_then(PyValue::as_str),
        Some("rc")
    );
    let m = string_form(r#"{"role": "user", "content": "a", "reasoning": "r"}"#).expect("convert");
    assert!(!m.contains_key("reasoning"));
}

#[test]
fn tool_call_arguments_become_dicts() {
    let call = |args: &str| {
        let json = format!(
            r#"{{"role": "assistant", "tool_calls": [{{"id": "c", "type": "function", "index": 0,
                "function": {{"name": "f", "arguments": {args}}}}}]}}"#
        );
        let m = string_form(&json).expect("convert");
        let PyValue::List(calls) = m.get("tool_calls").expect("tool_calls").clone() else {
            panic!("list");
        };
        calls[0].clone()
    };
    let c = call(r#""{\"b\":1.50,\"a\":\"\\u00e9\"}""#);
    let keys: Vec<&String> = match &c {
        PyValue::Dict(d) => d.iter().map(|(k, _)| k).collect(),
        _ => panic!("dict"),
    };
    assert_eq!(keys, ["id", "function", "type", "index"]);
    let args = c
        .get("function")
        .and_then(|f| f.get("arguments"))
        .expect("arguments");
    assert_eq!(args.get("b"), Some(&PyValue::Float(1.5)));
    assert_eq!(args.get("a").and_then(PyValue::as_str), Some("é"));
    for empty in [
        r#""""#,
        r#""{\"a\": ""#,
        r#""[1, 2]""#,
        r#""null""#,
        r#""   ""#,
    ] {
        let args = call(empty)
            .get("function")
            .and_then(|f| f.get("arguments"))
            .cloned();
        assert_eq!(args, Some(PyValue::Dict(PyDict::new())), "{empty}");
    }
}

#[test]
fn malformed_tool_calls_are_rejected_and_empty_lists_dropped() {
    for bad in [
        r#"[{"id": "c", "function": {"name": "f", "arguments": "{}"}}]"#,
        r#"[{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]"#,
        r#"[{"type": "function", "function": {"name": "f", "arguments": "{}"}}]"#,
        r#"[null]"#,
    ] {
        let json = format!(r#"{{"role": "assistant", "tool_calls": {bad}}}"#);
        assert!(
            string_form(&json).expect_err(bad).is_client_error(),
            "{bad}"
        );
    }
    let m =
        string_form(r#"{"role": "assistant", "content": "x", "tool_calls": []}"#).expect("convert");
    assert!(!m.contains_key("tool_calls"));
    // Other roles' tool_calls are ignored, whatever they hold.
    assert!(string_form(r#"{"role": "user", "content": "x", "tool_calls": "junk"}"#).is_ok());
}

#[test]
fn openai_format_keeps_parts() {
    let m = convert(
        0,
        &message(r#"{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {"t": 1}}, {"type": "text", "text": ""}]}"#),
        ContentFormat::OpenAi,
    )
    .expect("convert");
    let PyValue::List(parts) = m.get("content").expect("content") else {
        panic!("list")
    };
    assert_eq!(parts.len(), 2);
    assert!(parts[0].get("cache_control").is_some());
    let tool = convert(
        0,
        &message(r#"{"role": "tool", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}"#),
        ContentFormat::OpenAi,
    )
    .expect("convert");
    assert_eq!(tool.get("content").and_then(PyValue::as_str), Some("a\nb"));
}

#[test]
fn developer_messages_merge_into_one_leading_system() {
    let conv: Vec<PyDict> = [
        r#"{"role": "system", "content": "a"}"#,
        r#"{"role": "user", "content": "u"}"#,
        r#"{"role": "system", "content": ""}"#,
        r#"{"role": "developer", "content": "d"}"#,
    ]
    .iter()
    .map(|j| string_form(j).expect("convert"))
    .collect();
    let out = developer_to_system(conv).expect("merge");
    assert_eq!(out.len(), 2);
    assert_eq!(
        out[0].get("content").and_then(PyValue::as_str),
        Some("a\n\nd")
    );
    assert_eq!(out[1].get("role").and_then(PyValue::as_str), Some("user"));
    // A lone developer message first: renamed, nothing to merge.
    let out = developer_to_system(vec![
        string_form(r#"{"role": "developer", "content": "d"}"#).expect("convert"),
    ])
    .expect("merge");
    assert_eq!(out[0].get("role").and_then(PyValue::as_str), Some("system"));
    assert!(!out[0].contains_key("tools"));
}
