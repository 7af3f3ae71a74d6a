//! Python behaviour inside templates: string methods whose details differ
//! from minijinja-contrib's (`strip` family and `split` use Python's notion
//! of whitespace; `rsplit`), and printing values as `str()` does
//! (`None`, `True`, float `repr`).

use minijinja::value::{Value, ValueKind, from_args};
use minijinja::{Error, ErrorKind, Output, State};

use super::error::not_reproducible;
use super::pyfmt::str_repr;
use super::tojson::number_text;
use super::value::{BigInt, PyDictObject, PyTuple, items_of};

/// `str.isspace()` for one character.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `s.strip(chars)` / `lstrip` / `rstrip` with Python's defaults.
pub fn py_strip<'a>(s: &'a str, chars: Option<&str>, left: bool, right: bool) -> &'a str {
    let pred = |c: char| match chars {
        Some(set) => set.contains(c),
        None => is_py_space(c),
    };
    let s = if left { s.trim_start_matches(pred) } else { s };
    if right { s.trim_end_matches(pred) } else { s }
}

/// `s.split(None, maxsplit)`: runs of whitespace, no empty pieces.
fn split_whitespace(s: &str, maxsplit: Option<usize>) -> Vec<Value> {
    let mut out = Vec::new();
    let mut rest = py_strip(s, None, true, false);
    while !rest.is_empty() {
        if maxsplit.is_some_and(|m| out.len() >= m) {
            out.push(Value::from(rest));
            break;
        }
        let end = rest.find(is_py_space).unwrap_or(rest.len());
        out.push(Value::from(&rest[..end]));
        rest = py_strip(&rest[end..], None, true, false);
    }
    out
}

/// Unknown-method callback: Python string methods first, then
/// minijinja-contrib's `pycompat` for everything else.
pub fn unknown_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        match method {
            "strip" | "lstrip" | "rstrip" => {
                let (chars,): (Option<Value>,) = from_args(args)?;
                let chars = chars.filter(|c| !c.is_none());
                let chars = match &chars {
                    Some(c) => Some(c.as_str().ok_or_else(|| {
                        Error::new(ErrorKind::InvalidOperation, "strip arg must be None or str")
                    })?),
                    None => None,
                };
                let left = method != "rstrip";
                let right = method != "lstrip";
                return Ok(Value::from(py_strip(s, chars, left, right)));
            }
            "split" | "rsplit" => {
                let (sep, maxsplit): (Option<Value>, Option<i64>) = from_args(args)?;
                let maxsplit = maxsplit.and_then(|m| usize::try_from(m).ok());
                return split(
                    s,
                    sep.filter(|v| !v.is_none()),
                    maxsplit,
                    method == "rsplit",
                );
            }
            _ => {}
        }
    }
    if value.kind() == ValueKind::Map && method == "items" {
        let () = from_args(args)?;
        return items_of(value);
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

fn split(
    s: &str,
    sep: Option<Value>,
    maxsplit: Option<usize>,
    from_right: bool,
) -> Result<Value, Error> {
    let Some(sep) = sep else {
        if from_right && maxsplit.is_some() {
            return Err(not_reproducible("str.rsplit(None, maxsplit)"));
        }
        return Ok(Value::from(split_whitespace(s, maxsplit)));
    };
    let sep = sep
        .as_str()
        .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "must be str or None"))?;
    if sep.is_empty() {
        return Err(Error::new(ErrorKind::InvalidOperation, "empty separator"));
    }
    let parts: Vec<Value> = match (maxsplit, from_right) {
        (None, _) => s.split(sep).map(Value::from).collect(),
        (Some(n), false) => s.splitn(n + 1, sep).map(Value::from).collect(),
        (Some(n), true) => {
            let mut v: Vec<Value> = s.rsplitn(n + 1, sep).map(Value::from).collect();
            v.reverse();
            v
        }
    };
    Ok(Value::from(parts))
}

/// Writes `{{ value }}` as Jinja2 under Python would (`str(value)`).
pub fn py_formatter(out: &mut Output, _state: &State, value: &Value) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::Undefined => return Ok(()),
        ValueKind::String => {
            return out
                .write_str(value.as_str().unwrap_or_default())
                .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()));
        }
        _ => py_str(value)?,
    };
    out.write_str(&text)
        .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
}

/// `str(value)` for non-string values.
fn py_str(value: &Value) -> Result<String, Error> {
    match value.kind() {
        ValueKind::None => Ok("None".into()),
        ValueKind::Bool => Ok(if value.is_true() { "True" } else { "False" }.into()),
        ValueKind::Number => number_text(value, false),
        _ => py_repr(value, 0),
    }
}

/// `repr(value)` of containers of simple values.
fn py_repr(value: &Value, depth: usize) -> Result<String, Error> {
    if depth > 100 {
        return Err(not_reproducible("printing a deeply nested value"));
    }
    match value.kind() {
        ValueKind::String => str_repr(value.as_str().unwrap_or_default())
            .ok_or_else(|| not_reproducible("printing a container holding unusual characters")),
        ValueKind::None | ValueKind::Bool | ValueKind::Number => py_str(value),
        ValueKind::Plain if value.downcast_object_ref::<BigInt>().is_some() => {
            Ok(value.to_string())
        }
        ValueKind::Seq => {
            let items: Vec<String> = value
                .try_iter()?
                .map(|v| py_repr(&v, depth + 1))
                .collect::<Result<_, _>>()?;
            Ok(if value.downcast_object_ref::<PyTuple>().is_none() {
                format!("[{}]", items.join(", "))
            } else if items.len() == 1 {
                format!("({},)", items[0])
            } else {
                format!("({})", items.join(", "))
            })
        }
        ValueKind::Map => {
            let ordered = value.downcast_object_ref::<PyDictObject>().is_some();
            let keys: Vec<Value> = value.try_iter()?.collect();
            if !ordered && keys.len() > 1 {
                return Err(not_reproducible(
                    "printing a dict built inside the template",
                ));
            }
            let mut items = Vec::with_capacity(keys.len());
            for k in keys {
                let v = value.get_item(&k)?;
                items.push(format!(
                    "{}: {}",
                    py_repr(&k, depth + 1)?,
                    py_repr(&v, depth + 1)?
                ));
            }
            Ok(format!("{{{}}}", items.join(", ")))
        }
        kind => Err(not_reproducible(format!("printing a {kind} value"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_uses_python_whitespace() {
        assert_eq!(py_strip("\u{1f} a \u{a0}", None, true, true), "a");
        assert_eq!(py_strip("\n\nx\n", Some("\n"), true, false), "x\n");
        assert_eq!(py_strip("xyhixy", Some("xy"), true, true), "hi");
    }

    #[test]
    fn whitespace_split_matches_python() {
        let got: Vec<String> = split_whitespace("  a b\t\tc  ", Some(1))
            .iter()
            .map(|v| v.to_string())
            .collect();
        assert_eq!(got, ["a", "b\t\tc  "]);
        let got: Vec<String> = split_whitespace(" a  b ", None)
            .iter()
            .map(|v| v.to_string())
            .collect();
        assert_eq!(got, ["a", "b"]);
        assert!(split_whitespace("   ", None).is_empty());
    }
}
