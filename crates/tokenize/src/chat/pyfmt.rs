//! Python's text forms of scalars: `repr(float)`, `json.dumps` strings and
//! `str()` of the values a template may print.
//!
//! Templates are rendered by Jinja2 in Python, so a float prints as
//! `1e+16` and not `10000000000000000`, `None` as `None`, and so on.

use std::fmt::Write;

/// `repr(x)` for a Python float: shortest round-trip digits, exponent form
/// below 1e-4 and from 1e16 on, `.0` on integral values.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7", "1e16", "0e0".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    // Position of the decimal point relative to the digits (CPython's decpt).
    let decpt = exp + 1;
    let mut out = String::with_capacity(digits.len() + 8);
    if neg {
        out.push('-');
    }
    if !(-4 < decpt && decpt <= 16) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(
            out,
            "e{}{:02}",
            if e < 0 { '-' } else { '+' },
            e.unsigned_abs()
        );
    } else if decpt <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', decpt.unsigned_abs() as usize));
        out.push_str(&digits);
    } else {
        let point = decpt as usize;
        if point < digits.len() {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        } else {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', point - digits.len()));
            out.push_str(".0");
        }
    }
    out
}

/// A float as `json.dumps` writes it (`allow_nan=True`).
pub fn json_float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        float_repr(x)
    }
}

/// Appends `s` quoted as `json.dumps` quotes strings.
pub fn json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `repr(s)` for strings of printable ASCII, letters and digits (others
/// are refused: Python's full printability table is not reproduced here).
pub fn str_repr(s: &str) -> Option<String> {
    if !s
        .chars()
        .all(|c| (' '..='~').contains(&c) || (!c.is_ascii() && c.is_alphanumeric()))
    {
        return None;
    }
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        if c == '\\' || c == quote {
            out.push('\\');
        }
        out.push(c);
    }
    out.push(quote);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1.5, "1.5"),
            (100000.0, "100000.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (9007199254740992.0, "9007199254740992.0"),
            (1e22, "1e+22"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e-7, "1e-07"),
            (2.5e-5, "2.5e-05"),
            (1.23e-18, "1.23e-18"),
            (0.1, "0.1"),
            (123456789.12345679, "123456789.12345679"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-1.5e300, "-1.5e+300"),
            (1234.5, "1234.5"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(*x), *want, "repr({x:e})");
        }
        assert_eq!(json_float(f64::INFINITY), "Infinity");
        assert_eq!(json_float(f64::NAN), "NaN");
    }

    #[test]
    fn json_string_escapes_like_python() {
        let mut s = String::new();
        json_string(
            &mut s,
            "a\"b\\c\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}é\u{2028}😀/",
            false,
        );
        assert_eq!(
            s,
            "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0000\\u001f\u{7f}é\u{2028}😀/\""
        );
        let mut s = String::new();
        json_string(&mut s, "é😀\u{7f}~", true);
        assert_eq!(s, "\"\\u00e9\\ud83d\\ude00\\u007f~\"");
    }

    #[test]
    fn str_repr_quotes_like_python() {
        assert_eq!(str_repr("ab").as_deref(), Some("'ab'"));
        assert_eq!(str_repr("it's").as_deref(), Some("\"it's\""));
        assert_eq!(str_repr("'\"").as_deref(), Some("'\\'\"'"));
        assert_eq!(str_repr("a\\b").as_deref(), Some("'a\\\\b'"));
        assert_eq!(str_repr("dé 中").as_deref(), Some("'dé 中'"));
        assert_eq!(str_repr("a\u{a0}b"), None);
        assert_eq!(str_repr("🙂"), None);
    }
}
