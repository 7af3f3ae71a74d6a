//! Assistant `tool_calls` as vLLM keeps them: validated like pydantic
//! (`id`, `type: "function"`, `function.name`, string `function.arguments`)
//! and each `arguments` string parsed with `json.loads` into a dict
//! (`chat_message.py::_postprocess_messages`).

use super::error::{ChatError, UnsupportedReason};
use super::pyjson::{PyJsonError, loads};
use super::pyvalue::{PyDict, PyValue};

/// Validates `tool_calls` like pydantic and parses each `arguments`
/// string like `_postprocess_messages`.
pub fn tool_calls(v: &PyValue) -> Result<PyValue, ChatError> {
    let PyValue::List(items) = v else {
        return Err(ChatError::invalid("tool_calls: must be a list"));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(tool_call(item).map_err(|e| match e {
            ChatError::Invalid(m) => ChatError::invalid(format!("tool_calls[{i}]{m}")),
            other => other,
        })?);
    }
    Ok(PyValue::List(out))
}

fn required_str<'a>(d: &'a PyDict, key: &str) -> Result<&'a str, ChatError> {
    match d.get(key) {
        Some(PyValue::Str(s)) => Ok(s),
        Some(other) => Err(ChatError::invalid(format!(
            ".{key}: must be a string, got {}",
            other.type_name()
        ))),
        None => Err(ChatError::invalid(format!(".{key}: field required"))),
    }
}

fn tool_call(item: &PyValue) -> Result<PyValue, ChatError> {
    let PyValue::Dict(call) = item else {
        return Err(ChatError::invalid(": must be an object"));
    };
    let id = required_str(call, "id")?;
    let kind = required_str(call, "type")?;
    if kind != "function" {
        return Err(ChatError::invalid(
            ".type: only 'function' tool calls are supported",
        ));
    }
    let Some(PyValue::Dict(function)) = call.get("function") else {
        return Err(ChatError::invalid(".function: must be an object"));
    };
    let in_function = |e: ChatError| match e {
        ChatError::Invalid(m) => ChatError::invalid(format!(".function{m}")),
        other => other,
    };
    let args = required_str(function, "arguments").map_err(in_function)?;
    let name = required_str(function, "name").map_err(in_function)?;
    let parsed = parse_arguments(args)?;

    let mut f = PyDict::new();
    f.push_unique("arguments", parsed);
    f.push_unique("name", PyValue::Str(name.to_owned()));
    for (k, v) in function.iter() {
        if !matches!(k.as_str(), "arguments" | "name") {
            f.push_unique(k.clone(), v.clone());
        }
    }
    let mut out = PyDict::new();
    out.push_unique("id", PyValue::Str(id.to_owned()));
    out.push_unique("function", PyValue::Dict(f));
    out.push_unique("type", PyValue::Str(kind.to_owned()));
    for (k, v) in call.iter() {
        if !matches!(k.as_str(), "id" | "function" | "type") {
            out.push_unique(k.clone(), v.clone());
        }
    }
    Ok(PyValue::Dict(out))
}

/// `json.loads(arguments)`: empty, invalid or non-object JSON becomes `{}`
/// (vLLM logs a warning); Python's other failures fail the request.
fn parse_arguments(args: &str) -> Result<PyValue, ChatError> {
    if args.is_empty() {
        return Ok(PyValue::Dict(PyDict::new()));
    }
    match loads(args) {
        Ok(PyValue::Dict(d)) => Ok(PyValue::Dict(d)),
        Ok(_) => Ok(PyValue::Dict(PyDict::new())),
        Err(e) if e.is_decode_error() => Ok(PyValue::Dict(PyDict::new())),
        Err(PyJsonError::TooDeep) => Err(ChatError::unsupported(
            UnsupportedReason::JsonDepth,
            "tool call arguments nested too deeply",
        )),
        Err(e) => Err(ChatError::invalid(format!(".function.arguments: {e}"))),
    }
}
