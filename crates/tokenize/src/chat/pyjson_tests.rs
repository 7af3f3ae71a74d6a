//! `json.loads` edge cases, checked against CPython 3.11's behaviour.

use super::*;

fn obj(text: &str) -> PyDict {
    match loads(text) {
        Ok(PyValue::Dict(d)) => d,
        other => panic!("{text}: {other:?}"),
    }
}

fn int(i: i128) -> PyValue {
    PyValue::Int(PyInt::Small(i))
}

#[test]
fn duplicate_keys_keep_first_place_and_last_value() {
    let d = obj(r#"{"a": 1, "b": 2, "a": 3}"#);
    let keys: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(d.get("a"), Some(&int(3)));
}

#[test]
fn numbers_follow_python() {
    let d = obj(
        r#"{"f": 1.50, "e": 1e5, "E": 1E+2, "z": -0.0, "iz": -0, "big": 12345678901234567890,
            "huge": 123456789012345678901234567890123456789012345678901234567890,
            "inf": 1e400, "nan": NaN, "pinf": Infinity, "ninf": -Infinity, "round": 9007199254740993.0}"#,
    );
    assert_eq!(d.get("f"), Some(&PyValue::Float(1.5)));
    assert_eq!(d.get("e"), Some(&PyValue::Float(100000.0)));
    assert_eq!(d.get("E"), Some(&PyValue::Float(100.0)));
    assert!(matches!(d.get("z"), Some(PyValue::Float(z)) if *z == 0.0 && z.is_sign_negative()));
    assert_eq!(d.get("iz"), Some(&int(0)));
    assert_eq!(d.get("big"), Some(&int(12345678901234567890)));
    assert_eq!(
        d.get("huge"),
        Some(&PyValue::Int(PyInt::Big(
            "123456789012345678901234567890123456789012345678901234567890".into()
        )))
    );
    assert_eq!(d.get("inf"), Some(&PyValue::Float(f64::INFINITY)));
    assert!(matches!(d.get("nan"), Some(PyValue::Float(n)) if n.is_nan()));
    assert_eq!(d.get("pinf"), Some(&PyValue::Float(f64::INFINITY)));
    assert_eq!(d.get("ninf"), Some(&PyValue::Float(f64::NEG_INFINITY)));
    assert_eq!(d.get("round"), Some(&PyValue::Float(9007199254740992.0)));
}

#[test]
fn strings_unescape_like_python() {
    let d = obj(r#"{"s": "\u6771\u4eac \ud83d\ude00 \/ \" \\ \b\f\n\r\t"}"#);
    assert_eq!(
        d.get("s").and_then(PyValue::as_str),
        Some("東京 😀 / \" \\ \u{8}\u{c}\n\r\t")
    );
    // A high surrogate followed by a non-low escape: Python keeps a lone surrogate.
    assert!(matches!(
        loads(r#""\ud83d""#),
        Err(PyJsonError::LoneSurrogate(_))
    ));
    assert!(matches!(
        loads(r#"{"lone": "\ud83d\u0041"}"#),
        Err(PyJsonError::LoneSurrogate(_))
    ));
}

#[test]
fn decode_errors_are_decode_errors() {
    for bad in [
        "",
        " ",
        "{",
        "[1,]",
        "{\"a\":1,}",
        "{'a': 1}",
        "01",
        "1.",
        "-",
        "1e",
        ".5",
        "+1",
        "\"tab\there\"",
        "{\"a\" 1}",
        "[1 2]",
        "nul",
        "\u{feff}{}",
        "{} x",
        "\"\\x41\"",
        "\"\\u12g4\"",
        "True",
        "undefined",
    ] {
        let err = loads(bad).expect_err(bad);
        assert!(err.is_decode_error(), "{bad:?}: {err}");
    }
}

#[test]
fn whitespace_is_json_whitespace_only() {
    assert_eq!(
        loads(" \t\r\n[ 1 , 2 ]\n "),
        Ok(PyValue::List(vec![int(1), int(2)]))
    );
    assert!(loads("\u{a0}1").is_err());
}

#[test]
fn python_only_failures_are_not_decode_errors() {
    let long = format!("{{\"a\": {}}}", "9".repeat(4301));
    assert_eq!(loads(&long), Err(PyJsonError::IntTooLong));
    assert!(loads(&"9".repeat(4300)).is_ok());
    let deep = format!("{}{}", "[".repeat(600), "]".repeat(600));
    assert_eq!(loads(&deep), Err(PyJsonError::TooDeep));
}

#[test]
fn request_bytes_may_start_with_a_bom() {
    assert_eq!(
        loads_bytes(b"\xef\xbb\xbf{}"),
        Ok(PyValue::Dict(PyDict::new()))
    );
    assert!(loads_bytes(b"{\"a\": \"\xff\"}").is_err());
}
