//! The `tojson` filter exactly as transformers defines it:
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`.
//!
//! Unlike Jinja2's own `tojson` it escapes no HTML and keeps key order; with
//! no `indent` the separators are `", "` and `": "`.

use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::error::not_reproducible;
use super::pyfmt::{float_repr, json_float, json_string};
use super::value::{BigInt, PyDictObject};

/// The arguments of `json.dumps` that transformers exposes.
#[derive(Debug, Clone)]
pub struct DumpOptions {
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Indentation unit; `None` writes everything on one line.
    pub indent: Option<String>,
    /// Between items.
    pub item_separator: String,
    /// Between a key and its value.
    pub key_separator: String,
    /// Sort object keys.
    pub sort_keys: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions {
            ensure_ascii: false,
            indent: None,
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            sort_keys: false,
        }
    }
}

/// The template filter: `x | tojson`, `x | tojson(indent=2)`, ... with
/// Python's argument order `(ensure_ascii, indent, separators, sort_keys)`.
pub fn tojson_filter(value: &Value, args: Rest<Value>) -> Result<Value, Error> {
    let mut args = args.0;
    let mut named: Vec<(String, Value)> = Vec::new();
    if args.last().is_some_and(Value::is_kwargs)
        && let Some(kw) = args.pop()
    {
        for key in kw.try_iter()? {
            let name = key.as_str().unwrap_or_default().to_owned();
            named.push((name, kw.get_item(&key)?));
        }
    }
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > NAMES.len() {
        return Err(Error::new(ErrorKind::TooManyArguments, "tojson"));
    }
    let mut slots: [Option<Value>; 4] = Default::default();
    for (slot, v) in slots.iter_mut().zip(args) {
        *slot = Some(v);
    }
    for (name, v) in named {
        let at = NAMES.iter().position(|n| *n == name).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson got an unexpected keyword argument '{name}'"),
            )
        })?;
        slots[at] = Some(v);
    }
    let [ensure_ascii, indent, separators, sort_keys] = slots;
    let opts = options_from(ensure_ascii, indent, separators, sort_keys)?;
    dumps(value, &opts).map(Value::from)
}

fn options_from(
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    separators: Option<Value>,
    sort_keys: Option<Value>,
) -> Result<DumpOptions, Error> {
    let mut opts = DumpOptions {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
        ..DumpOptions::default()
    };
    match indent {
        None => {}
        Some(v) if v.is_none() => {}
        Some(v) => {
            opts.indent = Some(if let Some(s) = v.as_str() {
                s.to_owned()
            } else if v.kind() == ValueKind::Bool || v.is_integer() {
                let n = i64::try_from(v).unwrap_or(0);
                " ".repeat(usize::try_from(n).unwrap_or(0))
            } else {
                return Err(not_reproducible("tojson indent that is not an int or str"));
            });
            // Python drops the space after ',' when indenting.
            opts.item_separator = ",".into();
        }
    }
    if let Some(sep) = separators.filter(|v| !v.is_none()) {
        let parts: Vec<Value> = sep.try_iter()?.collect();
        match parts.as_slice() {
            [item, key] if item.as_str().is_some() && key.as_str().is_some() => {
                opts.item_separator = item.as_str().unwrap_or_default().to_owned();
                opts.key_separator = key.as_str().unwrap_or_default().to_owned();
            }
            _ => {
                return Err(not_reproducible(
                    "tojson separators that are not two strings",
                ));
            }
        }
    }
    Ok(opts)
}

/// `json.dumps(value, ...)` of a template value.
pub fn dumps(value: &Value, opts: &DumpOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, value, opts, 0)?;
    Ok(out)
}

fn newline(out: &mut String, opts: &DumpOptions, level: usize) {
    if let Some(unit) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(unit);
        }
    }
}

fn write_value(out: &mut String, v: &Value, opts: &DumpOptions, level: usize) -> Result<(), Error> {
    if level > 500 {
        return Err(not_reproducible("tojson of a value nested too deeply"));
    }
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&number_text(v, true)?),
        ValueKind::String => json_string(out, v.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_separator);
                }
                newline(out, opts, level + 1);
                write_value(out, item, opts, level + 1)?;
            }
            newline(out, opts, level);
            out.push(']');
        }
        ValueKind::Map => write_map(out, v, opts, level)?,
        ValueKind::Plain if v.downcast_object_ref::<BigInt>().is_some() => {
            out.push_str(&v.to_string());
        }
        kind => {
            return Err(not_reproducible(format!(
                "tojson of a {kind} value (Python's json.dumps refuses it)"
            )));
        }
    }
    Ok(())
}

fn write_map(out: &mut String, v: &Value, opts: &DumpOptions, level: usize) -> Result<(), Error> {
    let mut entries: Vec<(String, Value)> = Vec::new();
    for key in v.try_iter()? {
        let value = v.get_item(&key)?;
        entries.push((key_text(&key)?, value));
    }
    let ordered = v.downcast_object_ref::<PyDictObject>().is_some();
    if opts.sort_keys {
        if v.try_iter()?.any(|k| k.as_str().is_none()) {
            return Err(not_reproducible(
                "tojson(sort_keys=True) of a dict with non-str keys",
            ));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
    } else if !ordered && entries.len() > 1 {
        // minijinja keeps dict literals sorted, Python keeps them as written.
        return Err(not_reproducible(
            "tojson of a dict built inside the template (key order is lost)",
        ));
    }
    if entries.is_empty() {
        out.push_str("{}");
        return Ok(());
    }
    out.push('{');
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push_str(&opts.item_separator);
        }
        newline(out, opts, level + 1);
        json_string(out, key, opts.ensure_ascii);
        out.push_str(&opts.key_separator);
        write_value(out, value, opts, level + 1)?;
    }
    newline(out, opts, level);
    out.push('}');
    Ok(())
}

/// Keys as `json.dumps` converts them: str as is, numbers, bools and None
/// to their JSON text.
fn key_text(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_owned()),
        ValueKind::Number => number_text(key, true),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        kind => Err(not_reproducible(format!(
            "tojson of a dict with a {kind} key"
        ))),
    }
}

/// An int's digits, or a float in Python's form (`json` or `repr` style).
pub fn number_text(v: &Value, json: bool) -> Result<String, Error> {
    if v.is_integer() {
        if let Ok(i) = i128::try_from(v.clone()) {
            return Ok(i.to_string());
        }
        if let Ok(u) = u128::try_from(v.clone()) {
            return Ok(u.to_string());
        }
    }
    let f = f64::try_from(v.clone())?;
    Ok(if json { json_float(f) } else { float_repr(f) })
}

#[cfg(test)]
#[path = "tojson_tests.rs"]
mod tests;
