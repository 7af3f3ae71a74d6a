//! Content-format detection on template shapes vLLM classifies.

use super::*;

fn qwen3_template() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/tokenizers/qwen3/tokenizer_config.json"
    );
    let text = std::fs::read_to_string(path).expect("tokenizer_config.json");
    let cfg = crate::chat::pyjson::loads(&text).expect("json");
    cfg.get("chat_template")
        .and_then(|t| t.as_str())
        .expect("template")
        .to_owned()
}

#[test]
fn qwen3_is_string() {
    assert_eq!(detect(&qwen3_template()), ContentFormat::String);
}

#[test]
fn loops_over_message_content_are_openai() {
    for t in [
        "{% for m in messages %}{% for c in m['content'] %}{{ c.text }}{% endfor %}{% endfor %}",
        "{% for m in messages %}{% for c in m.content | selectattr('type', 'eq', 'text') %}{% endfor %}{% endfor %}",
        "{% for m in messages[1:] %}{%- for c in m[\"content\"][::-1] -%}{% endfor %}{% endfor %}",
        "{% set loop_messages = messages[1:] %}{% for m in loop_messages %}{% for c in m.content %}{% endfor %}{% endfor %}",
        "{% set ns = namespace(rest=messages) %}{% for m in ns.rest %}{% for c in m.content %}{% endfor %}{% endfor %}",
        "{% for m in messages %}{% set content = m.content %}{% for item in content %}{% endfor %}{% endfor %}",
        "{% macro show(parts) %}{% for p in parts %}{{ p.text }}{% endfor %}{% endmacro %}{% for m in messages %}{{ show(m.content) }}{% endfor %}",
    ] {
        assert_eq!(detect(t), ContentFormat::OpenAi, "{t}");
    }
}

#[test]
fn other_templates_are_string() {
    for t in [
        "{% for m in messages %}{{ m.content | trim }}{% endfor %}",
        "{% for m in messages %}{% for c in m.tool_calls %}{% endfor %}{% endfor %}",
        "{% for doc in documents %}{% for c in doc.content %}{% endfor %}{% endfor %}",
        "{% macro show(content) %}{% for p in content %}{% endfor %}{% endmacro %}{{ show(tools) }}",
        "{{ '{% for c in message.content %}' }}",
        "{# {% for m in messages %}{% for c in m.content %}{% endfor %}{% endfor %} #}",
        // vLLM's assertion on a single loop target fails: its default, "string".
        "{% for i, m in messages %}{% for c in m.content %}{% endfor %}{% endfor %}",
    ] {
        assert_eq!(detect(t), ContentFormat::String, "{t}");
    }
}
