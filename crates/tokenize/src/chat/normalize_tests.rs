//! Request-level rules: vLLM's checks, tool re-dump and kwargs merge.

use super::*;
use crate::chat::tojson::{DumpOptions, dumps};

fn request(json: &str) -> ChatRequest {
    ChatRequest::from_json(json.as_bytes()).expect("request")
}

fn prepared(json: &str) -> Result<Prepared, ChatError> {
    prepare(&request(json), &ServerSettings::default())
}

fn kw<'a>(p: &'a Prepared, key: &str) -> Option<&'a PyValue> {
    p.kwargs.get(key)
}

const USER: &str = r#"[{"role": "user", "content": "hi"}]"#;

#[test]
fn reasoning_effort_sets_enable_thinking_unless_given() {
    let p = prepared(&format!(
        r#"{{"messages": {USER}, "reasoning_effort": "none"}}"#
    ))
    .expect("prepare");
    assert_eq!(kw(&p, "enable_thinking"), Some(&PyValue::Bool(false)));
    assert_eq!(
        kw(&p, "reasoning_effort").and_then(PyValue::as_str),
        Some("none")
    );
    let p = prepared(&format!(
        r#"{{"messages": {USER}, "reasoning_effort": "low"}}"#
    ))
    .expect("prepare");
    assert_eq!(kw(&p, "enable_thinking"), Some(&PyValue::Bool(true)));
    let p = prepared(&format!(
        r#"{{"messages": {USER}, "reasoning_effort": "none", "chat_template_kwargs": {{"enable_thinking": true}}}}"#
    ))
    .expect("prepare");
    assert_eq!(kw(&p, "enable_thinking"), Some(&PyValue::Bool(true)));
    // An explicit null blocks the default and is then dropped.
    let p = prepared(&format!(
        r#"{{"messages": {USER}, "reasoning_effort": "none", "chat_template_kwargs": {{"enable_thinking": null}}}}"#
    ))
    .expect("prepare");
    assert_eq!(kw(&p, "enable_thinking"), None);
}

#[test]
fn request_fields_override_template_kwargs_and_unset_values_drop() {
    let p = prepared(&format!(
        r#"{{"messages": {USER}, "chat_template_kwargs": {{"add_generation_prompt": false, "x": "auto", "y": null, "z": 1}}}}"#
    ))
    .expect("prepare");
    assert_eq!(kw(&p, "add_generation_prompt"), Some(&PyValue::Bool(true)));
    assert_eq!(
        kw(&p, "continue_final_message"),
        Some(&PyValue::Bool(false))
    );
    assert!(kw(&p, "x").is_none() && kw(&p, "y").is_none());
    assert!(kw(&p, "z").is_some());
    assert_eq!(kw(&p, "tokenize"), Some(&PyValue::Bool(false)));
}

#[test]
fn tools_are_redumped_in_fixed_order() {
    let p = prepared(&format!(
        r#"{{"messages": {USER}, "tools": [
            {{"function": {{"parameters": {{"z": 1, "a": 1.50}}, "x-extra": 1, "strict": "yes", "name": "f"}}, "defer_loading": true, "junk": 1}},
            {{"type": "function", "function": {{"name": "g"}}}}]}}"#
    ))
    .expect("prepare");
    let tools = crate::chat::value::to_value(p.tools().expect("tools"));
    assert_eq!(
        dumps(&tools, &DumpOptions::default()).expect("dumps"),
        "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": null, \"parameters\": {\"z\": 1, \"a\": 1.5}, \
         \"strict\": true, \"defer_loading\": true}, \"defer_loading\": true}, \
         {\"type\": \"function\", \"function\": {\"name\": \"g\", \"description\": null, \"parameters\": null}}]"
    );
}

#[test]
fn tool_choice_rules() {
    let tools = r#"[{"type": "function", "function": {"name": "f"}}]"#;
    for (choice, ok) in [
        (r#""none""#, true),
        (r#""auto""#, true),
        (r#""required""#, true),
        (r#"null"#, true),
        (r#"{"type": "function", "function": {"name": "f"}}"#, true),
        (r#"{"function": {"name": "f"}}"#, true),
        (r#"{"type": "function", "function": {"name": "g"}}"#, false),
        (r#"{"type": "function"}"#, false),
        (r#""bogus""#, false),
    ] {
        let json = format!(r#"{{"messages": {USER}, "tools": {tools}, "tool_choice": {choice}}}"#);
        assert_eq!(prepared(&json).is_ok(), ok, "{choice}");
    }
    let no_tools = format!(r#"{{"messages": {USER}, "tool_choice": "auto"}}"#);
    assert!(prepared(&no_tools).expect_err("no tools").is_client_error());
    let empty = format!(r#"{{"messages": {USER}, "tools": []}}"#);
    assert!(prepared(&empty).expect_err("empty tools").is_client_error());
    let server = ServerSettings {
        exclude_tools_when_tool_choice_none: true,
        ..ServerSettings::default()
    };
    let json = format!(r#"{{"messages": {USER}, "tools": {tools}, "tool_choice": "none"}}"#);
    assert!(
        prepare(&request(&json), &server)
            .expect("prepare")
            .tools()
            .is_none()
    );
}

#[test]
fn requests_vllm_refuses_or_we_cannot_follow() {
    let invalid = [
        format!(r#"{{"messages": {USER}, "chat_template": "x"}}"#),
        format!(r#"{{"messages": {USER}, "chat_template_kwargs": {{"chat_template": "x"}}}}"#),
        format!(
            r#"{{"messages": {USER}, "continue_final_message": true, "add_generation_prompt": "no"}}"#
        ),
        format!(r#"{{"messages": {USER}, "documents": [{{"title": 1}}]}}"#),
    ];
    for json in &invalid {
        assert!(prepared(json).expect_err(json).is_client_error(), "{json}");
    }
    let unsupported = [
        format!(r#"{{"messages": {USER}, "truncate_prompt_tokens": 5}}"#),
        format!(r#"{{"messages": {USER}, "kv_transfer_params": {{"prompt_token_ids": [1, 2]}}}}"#),
    ];
    for json in &unsupported {
        assert!(
            matches!(prepared(json), Err(ChatError::Unsupported { .. })),
            "{json}"
        );
    }
    let trusted = ServerSettings {
        trust_request_chat_template: true,
        ..ServerSettings::default()
    };
    let json = format!(r#"{{"messages": {USER}, "chat_template": "x"}}"#);
    assert_eq!(
        prepare(&request(&json), &trusted)
            .expect("trusted")
            .request_template
            .as_deref(),
        Some("x")
    );
}

#[test]
fn kwargs_that_never_reach_the_template() {
    let template = ChatTemplate::compile("{{ pad_token }}{{ x }}", None).expect("compile");
    let p = prepared(&format!(
        r#"{{"messages": {USER}, "chat_template_kwargs": {{"x": 1, "padding": true, "pad_token": "P"}}}}"#
    ))
    .expect("prepare");
    let vars = template_vars(&p, &template, &[("pad_token".into(), None)]).expect("vars");
    let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.contains(&"x") && names.contains(&"pad_token") && !names.contains(&"padding"));
    // Without the kwarg, an unknown special token the template reads is unsupported.
    let p = prepared(&format!(r#"{{"messages": {USER}}}"#)).expect("prepare");
    assert!(matches!(
        template_vars(&p, &template, &[("pad_token".into(), None)]),
        Err(ChatError::Unsupported {
            reason: UnsupportedReason::SpecialToken,
            ..
        })
    ));
    let p = prepared(&format!(
        r#"{{"messages": {USER}, "chat_template_kwargs": {{"messages": []}}}}"#
    ))
    .expect("prepare");
    assert!(
        template_vars(&p, &template, &[])
            .expect_err("messages")
            .is_client_error()
    );
}
