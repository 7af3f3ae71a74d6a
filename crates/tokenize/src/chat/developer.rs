//! The `developer` role for templates that do not know it
//! (`renderers/hf.py`: `_convert_developer_to_system`,
//! `_consolidate_system_messages`).

use super::error::{ChatError, UnsupportedReason};
use super::pyvalue::{PyDict, PyValue};

/// Developer messages become system messages when the template has no
/// `"developer"` literal; then all system messages merge into the first
/// position, joined with `"\n\n"` (`renderers/hf.py`).
pub fn developer_to_system(conv: Vec<PyDict>) -> Result<Vec<PyDict>, ChatError> {
    let conv: Vec<PyDict> = conv
        .into_iter()
        .map(|mut m| {
            if m.get("role").and_then(PyValue::as_str) == Some("developer") {
                m.insert("role", PyValue::Str("system".into()));
                m.remove("tools");
            }
            m
        })
        .collect();
    let mut system_texts = Vec::new();
    let mut others = Vec::new();
    let mut needs = false;
    for (i, m) in conv.iter().enumerate() {
        if m.get("role").and_then(PyValue::as_str) != Some("system") {
            others.push(m.clone());
            continue;
        }
        needs |= i > 0 || !system_texts.is_empty();
        let text = match m.get("content") {
            Some(PyValue::Str(s)) => s.clone(),
            Some(PyValue::List(parts)) => {
                let mut texts = Vec::new();
                for p in parts {
                    match p {
                        PyValue::Dict(d) if d.contains_key("text") => match d.get("text") {
                            Some(PyValue::Str(s)) => texts.push(s.clone()),
                            _ => {
                                return Err(ChatError::unsupported(
                                    UnsupportedReason::TemplateFeature,
                                    "system content part with a null text",
                                ));
                            }
                        },
                        PyValue::Str(s) => texts.push(s.clone()),
                        _ => {}
                    }
                }
                texts.join("\n")
            }
            _ => String::new(),
        };
        if !text.is_empty() {
            system_texts.push(text);
        }
    }
    if !needs {
        return Ok(conv);
    }
    let mut merged = PyDict::new();
    merged.push_unique("role", PyValue::Str("system".into()));
    merged.push_unique("content", PyValue::Str(system_texts.join("\n\n")));
    let mut out = Vec::with_capacity(others.len() + 1);
    out.push(merged);
    out.extend(others);
    Ok(out)
}
