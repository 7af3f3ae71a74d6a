//! `tojson` = transformers' `json.dumps(x, ensure_ascii=False, ...)`;
//! expected strings are CPython 3.11's output.

use minijinja::Environment;

use super::*;
use crate::chat::pyjson::loads;
use crate::chat::value::to_value;

fn py(text: &str) -> Value {
    to_value(&loads(text).expect("json"))
}

fn render(template: &str, x: &Value) -> Result<String, Error> {
    let mut env = Environment::new();
    env.add_filter("tojson", tojson_filter);
    env.render_str(template, minijinja::context! { x => x.clone() })
}

#[test]
fn default_form_keeps_order_and_python_spacing() {
    let x = py(r#"{"z": 1, "a": [1.50, 1e5, -0.0, null, true, "é\n\u2028"], "m": {}, "l": []}"#);
    assert_eq!(
        render("{{ x | tojson }}", &x).expect("render"),
        "{\"z\": 1, \"a\": [1.5, 100000.0, -0.0, null, true, \"é\\n\u{2028}\"], \"m\": {}, \"l\": []}"
    );
}

#[test]
fn numbers_print_as_python() {
    let x = py(
        r#"[1e16, 1e-7, 0.1, 123456789012345678901234567890123456789012345, 12345678901234567890, NaN, -Infinity, 1e400, 2.5e-05]"#,
    );
    assert_eq!(
        dumps(&x, &DumpOptions::default()).expect("dumps"),
        "[1e+16, 1e-07, 0.1, 123456789012345678901234567890123456789012345, 12345678901234567890, NaN, -Infinity, Infinity, 2.5e-05]"
    );
}

#[test]
fn indent_variants() {
    let x = py(r#"{"a": [1, {"b": []}], "c": {}}"#);
    assert_eq!(
        render("{{ x | tojson(indent=2) }}", &x).expect("indent"),
        "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {}\n}"
    );
    assert_eq!(
        render("{{ x | tojson(indent=0) }}", &x).expect("indent 0"),
        "{\n\"a\": [\n1,\n{\n\"b\": []\n}\n],\n\"c\": {}\n}"
    );
    assert_eq!(
        render("{{ x.a | tojson(indent='\t') }}", &x).expect("indent str"),
        "[\n\t1,\n\t{\n\t\t\"b\": []\n\t}\n]"
    );
}

#[test]
fn ensure_ascii_sort_keys_and_separators() {
    let x = py(r#"{"b": "é😀", "a": 1}"#);
    assert_eq!(
        render("{{ x | tojson(ensure_ascii=true) }}", &x).expect("ascii"),
        "{\"b\": \"\\u00e9\\ud83d\\ude00\", \"a\": 1}"
    );
    // The first positional argument is ensure_ascii, as in Python.
    assert_eq!(
        render("{{ x.b | tojson(true) }}", &x).expect("positional"),
        "\"\\u00e9\\ud83d\\ude00\""
    );
    assert_eq!(
        render("{{ x | tojson(sort_keys=true) }}", &x).expect("sort"),
        "{\"a\": 1, \"b\": \"é😀\"}"
    );
    assert_eq!(
        render("{{ x | tojson(separators=[',', ':']) }}", &x).expect("separators"),
        "{\"b\":\"é😀\",\"a\":1}"
    );
}

#[test]
fn template_literals_and_scalars() {
    let none = Value::from(());
    assert_eq!(
        render("{{ none|tojson }} {{ true|tojson }} {{ 10|tojson }} {{ 1.0|tojson }} {{ 'a\"b'|tojson }} {{ {'k': 1}|tojson }}", &none)
            .expect("scalars"),
        "null true 10 1.0 \"a\\\"b\" {\"k\": 1}"
    );
    // Key order of a native minijinja map is lost: refuse rather than guess.
    assert!(render("{{ {'b': 1, 'a': 2} | tojson }}", &none).is_err());
    assert!(render("{{ nothing | tojson }}", &none).is_err());
}

#[test]
fn non_string_keys_convert_like_python() {
    let none = Value::from(());
    assert_eq!(
        render("{{ {1: 'a'} | tojson }}", &none).expect("int key"),
        "{\"1\": \"a\"}"
    );
    assert_eq!(
        render("{{ {none: 'a'} | tojson }}", &none).expect("none key"),
        "{\"null\": \"a\"}"
    );
}
