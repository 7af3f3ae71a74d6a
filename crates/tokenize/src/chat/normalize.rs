//! Request-level normalization, as vLLM 0.33 does it before the template
//! runs: its pre-validation checks (`chat_completion/protocol.py`), the
//! re-dump of `tools`, and the merge of template kwargs (`build_chat_params`,
//! `ChatParams.with_defaults`, `safe_apply_chat_template`).

use minijinja::value::Value;

use super::error::{ChatError, UnsupportedReason};
use super::pyvalue::{PyDict, PyValue};
use super::request::{ChatRequest, Field, ReasoningEffort, Tool};
use super::template::ChatTemplate;
use super::value::to_value;

/// Server-side settings that change the prompt (vLLM CLI flags).
#[derive(Debug, Clone, Default)]
pub struct ServerSettings {
    /// `--default-chat-template-kwargs`.
    pub default_chat_template_kwargs: PyDict,
    /// `--exclude-tools-when-tool-choice-none`.
    pub exclude_tools_when_tool_choice_none: bool,
    /// `--trust-request-chat-template`.
    pub trust_request_chat_template: bool,
}

/// What the request contributes besides its messages.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The merged template kwargs, as vLLM passes them on (`tools`,
    /// `tokenize`, `add_generation_prompt`, ... included).
    pub kwargs: PyDict,
    /// The request's `chat_template` (allowed by the trust setting).
    pub request_template: Option<String>,
    /// `chat_template_kwargs.chat_template` (used when nothing else is).
    pub kwargs_template: Option<String>,
    /// Tokenize with the tokenizer's special tokens.
    pub add_special_tokens: bool,
}

impl Prepared {
    /// The tools the template will see (selects a `tool_use` template).
    pub fn tools(&self) -> Option<&PyValue> {
        self.kwargs
            .get("tools")
            .filter(|t| !matches!(t, PyValue::Null))
    }
}

fn unset(v: &PyValue) -> bool {
    matches!(v, PyValue::Null) || v.as_str() == Some("auto")
}

/// Runs vLLM's request checks and builds the template kwargs.
pub fn prepare(req: &ChatRequest, server: &ServerSettings) -> Result<Prepared, ChatError> {
    check_tool_usage(req)?;
    if req.continue_final_message.raw_truthy && req.add_generation_prompt.raw_truthy {
        return Err(ChatError::invalid(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        ));
    }
    for (i, doc) in req.documents.iter().flatten().enumerate() {
        if let Some((k, _)) = doc.iter().find(|(_, v)| v.as_str().is_none()) {
            return Err(ChatError::invalid(format!(
                "documents[{i}].{k}: must be a string"
            )));
        }
    }
    if req
        .truncate_prompt_tokens
        .as_ref()
        .is_some_and(|v| !matches!(v, PyValue::Null))
    {
        return Err(ChatError::unsupported(
            UnsupportedReason::RequestOption,
            "truncate_prompt_tokens",
        ));
    }
    if let Some(PyValue::Dict(kv)) = &req.kv_transfer_params
        && kv
            .get("prompt_token_ids")
            .is_some_and(|v| !matches!(v, PyValue::Null))
    {
        return Err(ChatError::unsupported(
            UnsupportedReason::RequestOption,
            "kv_transfer_params.prompt_token_ids (ids forwarded by a prefill server)",
        ));
    }
    let request_kwargs = req.chat_template_kwargs.clone().unwrap_or_default();
    let kwargs_template = request_kwargs
        .get("chat_template")
        .filter(|v| !matches!(v, PyValue::Null));
    if (req.chat_template.is_some() || kwargs_template.is_some())
        && !server.trust_request_chat_template
    {
        return Err(ChatError::invalid(
            "Chat template is passed with request, but --trust-request-chat-template is not set.",
        ));
    }

    let tool_choice_none = matches!(&req.tool_choice, Field::Value(PyValue::Str(s)) if s == "none");
    let tool_dicts = match &req.tools {
        Some(tools) if !(tool_choice_none && server.exclude_tools_when_tool_choice_none) => {
            Some(PyValue::List(tools.iter().map(dump_tool).collect()))
        }
        _ => None,
    };

    // build_chat_params: request kwargs, then the request's own fields.
    let effort = req.reasoning_effort;
    let mut kwargs = request_kwargs.clone();
    let mut extras = vec![
        (
            "add_generation_prompt",
            PyValue::Bool(req.add_generation_prompt.value),
        ),
        (
            "continue_final_message",
            PyValue::Bool(req.continue_final_message.value),
        ),
        (
            "documents",
            req.documents.clone().map_or(PyValue::Null, |d| {
                PyValue::List(d.into_iter().map(PyValue::Dict).collect())
            }),
        ),
        (
            "reasoning_effort",
            effort.map_or(PyValue::Null, |e| PyValue::Str(e.as_str().into())),
        ),
    ];
    if effort.is_some() && !request_kwargs.contains_key("enable_thinking") {
        extras.push((
            "enable_thinking",
            PyValue::Bool(effort != Some(ReasoningEffort::None)),
        ));
    }
    for (k, v) in extras {
        if !unset(&v) {
            kwargs.insert(k, v);
        }
    }
    // with_defaults: server defaults, tools, tokenize=False, then the above.
    let mut merged = server.default_chat_template_kwargs.clone();
    if let Some(tools) = tool_dicts {
        merged.insert("tools", tools);
    }
    merged.insert("tokenize", PyValue::Bool(false));
    for (k, v) in kwargs {
        if !unset(&v) {
            merged.insert(k, v);
        }
    }
    let kwargs_template = match merged.get("chat_template") {
        None | Some(PyValue::Null) => None,
        Some(PyValue::Str(s)) => Some(s.clone()),
        Some(_) => {
            return Err(ChatError::invalid(
                "chat_template_kwargs.chat_template must be a string",
            ));
        }
    };
    Ok(Prepared {
        kwargs: merged,
        request_template: req.chat_template.clone(),
        kwargs_template,
        add_special_tokens: req.add_special_tokens.value,
    })
}

/// `check_tool_usage` and the pydantic types of `tools` / `tool_choice`.
fn check_tool_usage(req: &ChatRequest) -> Result<(), ChatError> {
    let bad = |m: &str| Err(ChatError::invalid(m.to_owned()));
    if let Some(tools) = &req.tools {
        if tools.is_empty() {
            return bad("`tools` must not be an empty array.");
        }
        for tool in tools {
            match &tool.kind {
                Field::Missing => {}
                Field::Value(k) if k == "function" => {}
                _ => return bad("tools[].type must be 'function'"),
            }
        }
    }
    let choice = match &req.tool_choice {
        Field::Missing | Field::Null => return Ok(()),
        Field::Value(v) => v,
    };
    if choice.as_str() == Some("none") {
        return Ok(());
    }
    let Some(tools) = &req.tools else {
        return bad("When using `tool_choice`, `tools` must be set.");
    };
    match choice {
        PyValue::Str(s) if s == "auto" || s == "required" => Ok(()),
        PyValue::Dict(d) => {
            if d.get("type")
                .is_some_and(|t| t.as_str() != Some("function"))
            {
                return bad("tool_choice.type must be 'function'");
            }
            let Some(PyValue::Dict(function)) = d.get("function") else {
                return bad("Invalid value for `function` in `tool_choice`");
            };
            match function.get("name") {
                Some(PyValue::Str(name)) if !name.is_empty() => {
                    if tools.iter().any(|t| t.function.name == *name) {
                        Ok(())
                    } else {
                        bad(
                            "The tool specified in `tool_choice` does not match any of the specified `tools`",
                        )
                    }
                }
                _ => bad("Invalid `name` in `function` in `tool_choice`"),
            }
        }
        _ => bad(
            "Invalid value for `tool_choice`: only named tools, \"none\", \"auto\" or \"required\"",
        ),
    }
}

/// `ChatCompletionToolsParam.model_dump()`: fixed key order, unknown keys
/// dropped, `description`/`parameters` kept as null, `strict` and
/// `defer_loading` only when set.
fn dump_tool(tool: &Tool) -> PyValue {
    let f = &tool.function;
    let mut function = PyDict::new();
    function.push_unique("name", PyValue::Str(f.name.clone()));
    function.push_unique(
        "description",
        f.description.clone().map_or(PyValue::Null, PyValue::Str),
    );
    function.push_unique(
        "parameters",
        f.parameters.clone().map_or(PyValue::Null, PyValue::Dict),
    );
    if let Some(strict) = f.strict {
        function.push_unique("strict", PyValue::Bool(strict.value));
    }
    if let Some(defer) = f.defer_loading.or(tool.defer_loading) {
        function.push_unique("defer_loading", PyValue::Bool(defer.value));
    }
    let mut out = PyDict::new();
    out.push_unique("type", PyValue::Str("function".into()));
    out.push_unique("function", PyValue::Dict(function));
    if let Some(defer) = tool.defer_loading {
        out.push_unique("defer_loading", PyValue::Bool(defer.value));
    }
    PyValue::Dict(out)
}

/// `apply_chat_template` parameters that never reach the template.
const CONSUMED: &[&str] = &[
    "tools",
    "chat_template",
    "continue_final_message",
    "padding",
    "truncation",
    "max_length",
    "return_tensors",
    "return_dict",
    "tokenizer_kwargs",
    "sanitize_control_tokens",
    "return_assistant_tokens_mask",
];

/// The template context: special tokens, the kwargs that reach the
/// template, and `tools`, `documents`, `add_generation_prompt`
/// (`messages` is added by the renderer).
pub fn template_vars(
    prepared: &Prepared,
    template: &ChatTemplate,
    special_tokens: &[(String, Option<String>)],
) -> Result<Vec<(String, Value)>, ChatError> {
    let kw = &prepared.kwargs;
    if kw.get("tokenize").is_some_and(PyValue::is_truthy) {
        return Err(ChatError::unsupported(
            UnsupportedReason::RequestOption,
            "chat_template_kwargs.tokenize",
        ));
    }
    for flag in ["sanitize_control_tokens", "return_assistant_tokens_mask"] {
        if kw.get(flag).is_some_and(PyValue::is_truthy) {
            return Err(ChatError::invalid(format!(
                "`{flag}=True` requires tokenize=True"
            )));
        }
    }
    for name in ["messages", "conversation"] {
        if kw.contains_key(name) {
            return Err(ChatError::invalid(format!(
                "chat_template_kwargs must not set '{name}'"
            )));
        }
    }
    if kw
        .get("continue_final_message")
        .is_some_and(PyValue::is_truthy)
        && kw
            .get("add_generation_prompt")
            .is_some_and(PyValue::is_truthy)
    {
        return Err(ChatError::invalid(
            "continue_final_message and add_generation_prompt are not compatible",
        ));
    }
    let list_of_dicts = |key: &str| -> Result<Value, ChatError> {
        match kw.get(key) {
            None | Some(PyValue::Null) => Ok(Value::from(())),
            Some(PyValue::List(items)) if items.iter().all(|i| matches!(i, PyValue::Dict(_))) => {
                Ok(to_value(&PyValue::List(items.clone())))
            }
            Some(_) => Err(ChatError::invalid(format!(
                "`{key}` must be a list of objects"
            ))),
        }
    };
    let mut vars: Vec<(String, Value)> = Vec::new();
    for (name, value) in special_tokens {
        match value {
            Some(text) => vars.push((name.clone(), Value::from(text.as_str()))),
            None if template.uses_variable(name) && !kw.contains_key(name) => {
                return Err(ChatError::unsupported(
                    UnsupportedReason::SpecialToken,
                    format!("template reads '{name}', which the renderer was not given"),
                ));
            }
            None => {}
        }
    }
    for (k, v) in kw.iter() {
        if CONSUMED.contains(&k.as_str())
            || matches!(
                k.as_str(),
                "tokenize" | "documents" | "add_generation_prompt"
            )
        {
            continue;
        }
        vars.retain(|(name, _)| name != k);
        vars.push((k.clone(), to_value(v)));
    }
    vars.push(("tools".into(), list_of_dicts("tools")?));
    vars.push(("documents".into(), list_of_dicts("documents")?));
    let agp = kw
        .get("add_generation_prompt")
        .map_or(Value::from(false), to_value);
    vars.push(("add_generation_prompt".into(), agp));
    Ok(vars)
}

/// Whether the template is to continue the final message.
pub fn continue_final_message(prepared: &Prepared) -> bool {
    prepared
        .kwargs
        .get("continue_final_message")
        .is_some_and(PyValue::is_truthy)
}

#[cfg(test)]
#[path = "normalize_tests.rs"]
mod tests;
