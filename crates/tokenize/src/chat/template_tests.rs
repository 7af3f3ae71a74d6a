//! Rendering as transformers' Jinja2 environment does.

use super::*;

fn one_message(role: &str, content: &str) -> Vec<PyDict> {
    let mut m = PyDict::new();
    m.insert("role", PyValue::Str(role.into()));
    m.insert("content", PyValue::Str(content.into()));
    vec![m]
}

fn render(src: &str) -> Result<String, ChatError> {
    let t = ChatTemplate::compile(src, None)?;
    t.render(one_message("user", "hi"), Vec::new(), false)
}

#[test]
fn whitespace_control_matches_jinja2_settings() {
    let src = "A\n  {% if true %}\n    B\n  {% endif %}\n  {# c #}\n  C {{- ' D ' -}} E\n{% for m in messages %}\n[{{ m.role }}]\n{% endfor %}\r\nend\n";
    assert_eq!(
        render(src).expect("render"),
        "A\n    B\n  C D E\n[user]\nend"
    );
}

#[test]
fn values_print_as_python_str() {
    let got = render(
        "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e16 }}|{{ 10/4 }}|{{ [1, 'a', none] }}|{{ messages[0] }}|{{ undefined_thing }}",
    );
    assert_eq!(
        got.expect("render"),
        "None|True|1.0|1e+16|2.5|[1, 'a', None]|{'role': 'user', 'content': 'hi'}|"
    );
}

#[test]
fn python_string_methods() {
    let got = render(
        "{{ '\\n x \\n'.strip() }}|{{ 'a</think>b'.split('</think>')[-1] }}|{{ '\\n\\nx'.lstrip('\\n') }}|{{ 'a b  c'.split() }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'ab'.startswith('a') }}",
    );
    assert_eq!(
        got.expect("render"),
        "x|b|x|['a', 'b', 'c']|['a,b', 'c']|True"
    );
}

#[test]
fn dict_literals_keep_their_order() {
    let got = render(
        "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}{% endfor %}|{{ {'b': 1, 'a': 2} | tojson }}|{{ {'b': 1}.items() | list }}",
    );
    assert_eq!(got.expect("render"), "ba|{\"b\": 1, \"a\": 2}|[('b', 1)]");
}

#[test]
fn raise_exception_rejects_the_request() {
    let err = render("{{ raise_exception('no system role') }}").expect_err("raise");
    assert!(err.is_client_error(), "{err}");
    assert!(err.to_string().contains("no system role"));
}

#[test]
fn engine_gaps_are_reported_unsupported() {
    for src in ["{{ 'a b'|wordcount }}", "{{ ['é🙂'] }}", "{% for x in %}"] {
        let err = render(src).expect_err(src);
        assert!(matches!(err, ChatError::Unsupported { .. }), "{src}: {err}");
    }
}

#[test]
fn strftime_now_formats_local_time() {
    let got = render("{{ strftime_now('%Y') }}").expect("render");
    assert_eq!(got.len(), 4);
    assert!(got.chars().all(|c| c.is_ascii_digit()));
}

#[test]
fn continue_final_message_cuts_where_the_message_ends() {
    let t = ChatTemplate::compile(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}",
        None,
    )
    .expect("compile");
    let got = t.render(one_message("assistant", "part  "), Vec::new(), true);
    assert_eq!(got.expect("render"), "<assistant>part  ");
    // The template trims the content: the tag's space is gone, so
    // transformers also trims what precedes the cut.
    let t = ChatTemplate::compile(
        "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}",
        None,
    )
    .expect("compile");
    let got = t.render(one_message("assistant", "part  "), Vec::new(), true);
    assert_eq!(got.expect("render"), "<assistant>part");
    // A template that drops the content cannot be continued.
    let t = ChatTemplate::compile(
        "{% for m in messages %}{{ m.role }}{% endfor %}{{ 'content' }}",
        None,
    )
    .expect("compile");
    assert!(
        t.render(one_message("assistant", "x"), Vec::new(), true)
            .is_err()
    );
}
