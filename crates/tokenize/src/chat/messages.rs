//! Messages as vLLM hands them to the template
//! (`renderers/chat_utils/chat_message.py`: `parse_chat_message_content`,
//! `_strip_claude_code_billing_header`, `_postprocess_messages`).

use super::error::{ChatError, UnsupportedReason};
use super::pyvalue::{PyDict, PyValue};
use super::request::{ChatMessage, Field, MessageContent};
use super::tool_calls::tool_calls;

/// How message content reaches the template (vLLM's content format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFormat {
    /// Parts joined into one string with `"\n"`.
    String,
    /// A list of `{"type": "text", "text": ...}` dicts.
    OpenAi,
}

const BILLING_HEADER: &str = "x-anthropic-billing-header";

/// Keys of content parts that vLLM knows (others are copied in OpenAI format).
const KNOWN_PART_FIELDS: &[&str] = &[
    "audio_embeds",
    "audio_url",
    "closed",
    "data",
    "file",
    "image_embeds",
    "image_pil",
    "image_url",
    "input_audio",
    "name",
    "prompt_cache_breakpoint",
    "refusal",
    "text",
    "thinking",
    "type",
    "uuid",
    "video_embeds",
    "video_url",
];

/// Keys that make a part multimodal whatever its type.
const MEDIA_KEYS: &[&str] = &[
    "image_url",
    "image_pil",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "prompt_embeds",
    "audio_url",
    "input_audio",
    "video_url",
];

/// Part types that carry media (we cannot render their placeholders).
const MEDIA_TYPES: &[&str] = &[
    "image_url",
    "input_image",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "prompt_embeds",
    "image_pil",
    "audio_url",
    "input_audio",
    "video_url",
    "file",
];

/// Converts one request message to vLLM's conversation message.
pub fn convert(
    index: usize,
    msg: &ChatMessage,
    format: ContentFormat,
) -> Result<PyDict, ChatError> {
    let at = |what: String| ChatError::invalid(format!("messages[{index}]: {what}"));
    let role = msg.role.as_str();
    let parts = match &msg.content {
        Field::Missing => Vec::new(),
        Field::Null if matches!(role, "assistant" | "function") => Vec::new(),
        Field::Null => return Err(at(format!("content must not be null for role '{role}'"))),
        Field::Value(MessageContent::Text(s)) => vec![text_part(s)],
        Field::Value(MessageContent::Parts(p)) => p.clone(),
    };
    let parts = if role == "system" {
        strip_billing_header(parts)
    } else {
        parts
    };
    let content = join_parts(parts, format).map_err(|e| prefix(e, index))?;

    let mut out = PyDict::new();
    out.push_unique("role", PyValue::Str(role.to_owned()));
    out.push_unique("content", content);
    if let Field::Null = msg.name {
        return Err(at("name must be a string".into()));
    }
    let checks_tool_calls = !matches!(role, "system" | "developer" | "user" | "tool");
    let tool_calls = match &msg.tool_calls {
        Some(tc) if checks_tool_calls && !matches!(tc, PyValue::Null) => {
            Some(tool_calls(tc).map_err(|e| prefix(e, index))?)
        }
        _ => None,
    };
    match role {
        "assistant" => {
            // An empty list is dropped so templates take the plain path.
            match tool_calls {
                Some(PyValue::List(calls)) if calls.is_empty() => {}
                Some(calls) => out.push_unique("tool_calls", calls),
                None => {}
            }
            let reasoning = match (&msg.reasoning, &msg.reasoning_content) {
                (Some(r), _) if !matches!(r, PyValue::Null) => Some(r),
                (_, Some(rc)) if !matches!(rc, PyValue::Null) => Some(rc),
                _ => None,
            };
            if let Some(r) = reasoning {
                if r.as_str().is_none() {
                    return Err(at(format!(
                        "reasoning must be a string, got {}",
                        r.type_name()
                    )));
                }
                out.push_unique("reasoning", r.clone());
                out.push_unique("reasoning_content", r.clone());
            }
        }
        "tool" => {
            match &msg.tool_call_id {
                Field::Missing => {}
                Field::Null => out.push_unique("tool_call_id", PyValue::Null),
                Field::Value(id) => out.push_unique("tool_call_id", PyValue::Str(id.clone())),
            }
            join_tool_text_list(&mut out);
        }
        _ => {}
    }
    if let Field::Value(name) = &msg.name {
        out.push_unique("name", PyValue::Str(name.clone()));
    }
    if let Some(PyValue::Str(task)) = &msg.task {
        out.push_unique("task", PyValue::Str(task.clone()));
    }
    if role == "developer" {
        out.push_unique("tools", msg.tools.clone().unwrap_or(PyValue::Null));
    }
    Ok(out)
}

fn prefix(e: ChatError, index: usize) -> ChatError {
    match e {
        ChatError::Invalid(m) => ChatError::Invalid(format!("messages[{index}]: {m}")),
        other => other,
    }
}

fn text_part(s: &str) -> PyValue {
    let mut d = PyDict::new();
    d.push_unique("type", PyValue::Str("text".into()));
    d.push_unique("text", PyValue::Str(s.to_owned()));
    PyValue::Dict(d)
}

/// In system messages, a text part starting with Claude Code's billing
/// header loses its first line (its `cch` changes on every request).
fn strip_billing_header(parts: Vec<PyValue>) -> Vec<PyValue> {
    let mut out = Vec::with_capacity(parts.len());
    for mut part in parts {
        if let PyValue::Dict(d) = &mut part {
            let is_text = d.get("type").and_then(PyValue::as_str) == Some("text");
            let rest = match d.get("text").and_then(PyValue::as_str) {
                Some(t) if is_text && t.starts_with(BILLING_HEADER) => Some(
                    t.split_once('\n')
                        .map(|(_, r)| r.to_owned())
                        .unwrap_or_default(),
                ),
                _ => None,
            };
            if let Some(rest) = rest {
                if rest.is_empty() {
                    continue;
                }
                d.insert("text", PyValue::Str(rest));
            }
        }
        out.push(part);
    }
    out
}

/// What one part contributes, after vLLM's checks.
enum Piece {
    /// Text (`None`: the part's text field was null or missing).
    Text(Option<String>, PyDict),
    /// A tool reference with its name.
    ToolRef(Option<String>),
}

fn optional_str(part: &PyDict, key: &str) -> Result<Option<String>, ChatError> {
    match part.get(key) {
        None | Some(PyValue::Null) => Ok(None),
        Some(PyValue::Str(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ChatError::invalid(format!(
            "content part field '{key}' must be a string, got {}",
            other.type_name()
        ))),
    }
}

fn piece(part: &PyValue) -> Result<Piece, ChatError> {
    let PyValue::Dict(part) = part else {
        return Err(ChatError::invalid("content parts must be objects"));
    };
    let uuid = part
        .get("uuid")
        .is_some_and(|u| !matches!(u, PyValue::Null));
    let has_media = MEDIA_KEYS.iter().any(|k| part.contains_key(k));
    let ty = part.get("type");
    if uuid || ty.is_none() {
        if has_media {
            return Err(media());
        }
        return Err(ChatError::invalid("Missing 'type' field in content part"));
    }
    let Some(PyValue::Str(ty)) = ty else {
        return Err(ChatError::invalid("content part 'type' must be a string"));
    };
    match ty.as_str() {
        "text" | "refusal" | "thinking" => Ok(Piece::Text(optional_str(part, ty)?, part.clone())),
        "tool_reference" => Ok(Piece::ToolRef(optional_str(part, "name")?)),
        t if MEDIA_TYPES.contains(&t) => Err(media()),
        t => Err(ChatError::invalid(format!(
            "unsupported content part type '{t}'"
        ))),
    }
}

fn media() -> ChatError {
    ChatError::unsupported(
        UnsupportedReason::MediaContent,
        "image/audio/video/embedding content parts",
    )
}

fn join_parts(parts: Vec<PyValue>, format: ContentFormat) -> Result<PyValue, ChatError> {
    match format {
        ContentFormat::String => {
            let mut texts: Vec<String> = Vec::new();
            for p in &parts {
                match piece(p)? {
                    Piece::Text(Some(t), _) | Piece::ToolRef(Some(t)) if !t.is_empty() => {
                        texts.push(t)
                    }
                    _ => {}
                }
            }
            Ok(PyValue::Str(texts.join("\n")))
        }
        ContentFormat::OpenAi => {
            let mut items = Vec::new();
            for p in &parts {
                items.push(match piece(p)? {
                    Piece::Text(None, orig)
                        if orig.get("type").and_then(PyValue::as_str) != Some("thinking") =>
                    {
                        continue;
                    }
                    Piece::Text(text, orig) => {
                        let mut d = PyDict::new();
                        d.push_unique("type", PyValue::Str("text".into()));
                        d.push_unique("text", text.map_or(PyValue::Null, PyValue::Str));
                        for (k, v) in orig.iter() {
                            if !KNOWN_PART_FIELDS.contains(&k.as_str()) {
                                d.push_unique(k.clone(), v.clone());
                            }
                        }
                        PyValue::Dict(d)
                    }
                    Piece::ToolRef(name) => {
                        let mut d = PyDict::new();
                        d.push_unique("type", PyValue::Str("tool_reference".into()));
                        d.push_unique("name", name.map_or(PyValue::Null, PyValue::Str));
                        PyValue::Dict(d)
                    }
                });
            }
            Ok(PyValue::List(items))
        }
    }
}

/// Tool messages with only text parts get one string (OpenAI format).
fn join_tool_text_list(msg: &mut PyDict) {
    let Some(PyValue::List(items)) = msg.get("content") else {
        return;
    };
    let all_text = items.iter().all(|i| match i {
        PyValue::Dict(d) => d.get("type").and_then(PyValue::as_str) == Some("text"),
        _ => true,
    });
    if !all_text {
        return;
    }
    let texts: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            PyValue::Dict(d) => Some(d.get("text").and_then(PyValue::as_str).unwrap_or("")),
            _ => None,
        })
        .collect();
    let joined = texts.join("\n");
    msg.insert("content", PyValue::Str(joined));
}

#[cfg(test)]
#[path = "messages_tests.rs"]
mod tests;
