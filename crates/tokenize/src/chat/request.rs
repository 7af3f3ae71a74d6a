//! The parts of an OpenAI chat-completions body that shape the prompt.
//!
//! Read with [`ChatRequest::from_json`], which parses the body as Python's
//! `json.loads` does (vLLM's view of it). Other fields are ignored. Fields
//! whose validation is quirky in vLLM stay raw [`PyValue`]s here and are
//! checked in `normalize`, where vLLM's rules are written down.

use serde::Deserialize;

use super::de::{DeError, from_value};
use super::pyjson::{PyJsonError, loads, loads_bytes};
use super::pyvalue::{PyDict, PyValue};

/// A chat-completions request, as far as the prompt is concerned.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Function tools offered to the model.
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    /// `"none" | "auto" | "required" | {"type": "function", ...}`, raw:
    /// whether it was sent at all matters.
    #[serde(default)]
    pub tool_choice: Field<PyValue>,
    /// Extra variables for the chat template.
    #[serde(default)]
    pub chat_template_kwargs: Option<PyDict>,
    /// Append the assistant header (default true).
    #[serde(default = "LaxBool::default_true")]
    pub add_generation_prompt: LaxBool,
    /// Leave the last message open for the model to continue.
    #[serde(default)]
    pub continue_final_message: LaxBool,
    /// Let the tokenizer add BOS/EOS (default false for chat).
    #[serde(default)]
    pub add_special_tokens: LaxBool,
    /// `none`, `minimal`, `low`, `medium`, `high`, `xhigh` or `max`.
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// RAG documents (`list[dict[str, str]]`).
    #[serde(default)]
    pub documents: Option<Vec<PyDict>>,
    /// A per-request template (vLLM refuses it unless trusted).
    #[serde(default)]
    pub chat_template: Option<String>,
    /// Prompt truncation; changes the ids, not followed here.
    #[serde(default)]
    pub truncate_prompt_tokens: Option<PyValue>,
    /// Disaggregated serving parameters (may carry ready prompt ids).
    #[serde(default)]
    pub kv_transfer_params: Option<PyValue>,
}

/// One message. `role` is free-form (vLLM accepts custom roles).
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool` or custom.
    pub role: String,
    /// Text or content parts; `null` is only valid for assistants.
    #[serde(default)]
    pub content: Field<MessageContent>,
    /// Participant name (must be a string when sent).
    #[serde(default)]
    pub name: Field<String>,
    /// Tool messages: the call being answered.
    #[serde(default)]
    pub tool_call_id: Field<String>,
    /// Assistant messages: the calls made (validated per role).
    #[serde(default)]
    pub tool_calls: Option<PyValue>,
    /// Assistant reasoning (vLLM's field).
    #[serde(default)]
    pub reasoning: Option<PyValue>,
    /// Assistant reasoning (deprecated name; `reasoning` wins).
    #[serde(default)]
    pub reasoning_content: Option<PyValue>,
    /// Developer messages may carry tools.
    #[serde(default)]
    pub tools: Option<PyValue>,
    /// Model-specific task marker, copied when a string.
    #[serde(default)]
    pub task: Option<PyValue>,
}

/// `content` as sent.
#[derive(Debug, Clone)]
pub enum MessageContent {
    /// A plain string.
    Text(String),
    /// A list of content parts (`{"type": "text", "text": ...}`, ...), raw.
    Parts(Vec<PyValue>),
}

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match PyValue::deserialize(d)? {
            PyValue::Str(s) => Ok(MessageContent::Text(s)),
            PyValue::List(parts) => Ok(MessageContent::Parts(parts)),
            other => Err(serde::de::Error::custom(format!(
                "expected a string or a list of content parts, got {}",
                other.type_name()
            ))),
        }
    }
}

/// A tool in `tools`.
#[derive(Debug, Clone, Deserialize)]
pub struct Tool {
    /// Must be `"function"` when sent.
    #[serde(rename = "type", default)]
    pub kind: Field<String>,
    /// The function.
    pub function: FunctionDefinition,
    /// Copied into the function when it has none.
    #[serde(default)]
    pub defer_loading: Option<LaxBool>,
}

/// A function tool's definition.
#[derive(Debug, Clone, Deserialize)]
pub struct FunctionDefinition {
    /// Function name.
    pub name: String,
    /// Description (rendered as `null` when absent).
    #[serde(default)]
    pub description: Option<String>,
    /// JSON schema, as sent (key order kept).
    #[serde(default)]
    pub parameters: Option<PyDict>,
    /// Structured-output strictness.
    #[serde(default)]
    pub strict: Option<LaxBool>,
    /// Lazy tool loading flag.
    #[serde(default)]
    pub defer_loading: Option<LaxBool>,
}

/// `reasoning_effort` values vLLM accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// No reasoning.
    None,
    /// Minimal.
    Minimal,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Extra high.
    Xhigh,
    /// Max (DeepSeek V4).
    Max,
}

impl ReasoningEffort {
    /// The string passed to templates.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::Xhigh => "xhigh",
            ReasoningEffort::Max => "max",
        }
    }
}

/// A field that can be absent, `null`, or set: vLLM treats these apart.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Field<T> {
    /// Not in the body.
    #[default]
    Missing,
    /// Sent as `null`.
    Null,
    /// Sent with a value.
    Value(T),
}

impl<T> Field<T> {
    /// The value, if one was sent.
    pub fn value(&self) -> Option<&T> {
        match self {
            Field::Value(v) => Some(v),
            _ => None,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<T>::deserialize(d)? {
            Some(v) => Field::Value(v),
            None => Field::Null,
        })
    }
}

/// A boolean read like pydantic's lax mode (`1`, `"yes"`, `"off"`, ...),
/// remembering Python's truthiness of the raw value for vLLM's pre-checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaxBool {
    /// The validated value.
    pub value: bool,
    /// `bool(raw)` of what was sent (`false` when absent).
    pub raw_truthy: bool,
}

impl LaxBool {
    fn default_true() -> Self {
        LaxBool {
            value: true,
            raw_truthy: false,
        }
    }
}

impl<'de> Deserialize<'de> for LaxBool {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = PyValue::deserialize(d)?;
        let value = match &raw {
            PyValue::Bool(b) => Some(*b),
            PyValue::Int(super::pyvalue::PyInt::Small(0)) => Some(false),
            PyValue::Int(super::pyvalue::PyInt::Small(1)) => Some(true),
            PyValue::Float(f) if *f == 0.0 => Some(false),
            PyValue::Float(f) if *f == 1.0 => Some(true),
            PyValue::Str(s) => match s.to_ascii_lowercase().as_str() {
                "0" | "f" | "n" | "no" | "off" | "false" => Some(false),
                "1" | "t" | "y" | "on" | "yes" | "true" => Some(true),
                _ => None,
            },
            _ => None,
        };
        let value = value.ok_or_else(|| {
            serde::de::Error::custom(format!("expected a boolean, got {}", raw.type_name()))
        })?;
        Ok(LaxBool {
            value,
            raw_truthy: raw.is_truthy(),
        })
    }
}

/// Why a body could not be read as a chat request.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Not JSON Python would accept.
    #[error(transparent)]
    Json(#[from] PyJsonError),
    /// JSON, but not a chat request.
    #[error(transparent)]
    Shape(#[from] DeError),
}

impl ChatRequest {
    /// Parses a request body as vLLM's server sees it.
    pub fn from_json(body: &[u8]) -> Result<ChatRequest, RequestError> {
        let value = loads_bytes(body)?;
        Ok(from_value(value)?)
    }

    /// Parses a body given as its top-level entries (key, value as JSON
    /// text), in order, as vLLM's server sees it: a repeated key keeps its
    /// first place and its last value.
    pub fn from_json_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<ChatRequest, RequestError> {
        let mut dict = PyDict::new();
        for (key, value) in entries {
            dict.insert(key, loads(value)?);
        }
        Ok(from_value(PyValue::Dict(dict))?)
    }

    /// Reads a request from an already parsed Python-exact value.
    pub fn from_py_value(value: PyValue) -> Result<ChatRequest, RequestError> {
        Ok(from_value(value)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_as_the_whole_body_reads() {
        let body = r#"{"messages":[{"role":"user","content":"a"}],"add_generation_prompt":true,"messages":[{"role":"user","content":"b"}],"tools":null}"#;
        let whole = ChatRequest::from_json(body.as_bytes()).unwrap();
        let entries = [
            ("messages", r#"[{"role":"user","content":"a"}]"#),
            ("add_generation_prompt", "true"),
            ("messages", r#"[{"role":"user","content":"b"}]"#),
            ("tools", "null"),
        ];
        let split = ChatRequest::from_json_entries(entries).unwrap();
        assert_eq!(format!("{whole:?}"), format!("{split:?}"));
        assert!(format!("{split:?}").contains("\"b\""));
        assert!(ChatRequest::from_json_entries([("messages", "[NaN")]).is_err());
    }
}
