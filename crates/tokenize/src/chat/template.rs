//! HF chat templates rendered as transformers renders them
//! (`utils/chat_template_utils.py`): Jinja2 with `trim_blocks`,
//! `lstrip_blocks`, no trailing newline kept, no autoescape, the
//! `raise_exception` and `strftime_now` globals, transformers' `tojson`,
//! and Python's string methods and printing.

use std::collections::HashSet;
use std::fmt::Write;

use minijinja::value::Value;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior};

use super::content_format;
use super::error::{
    ChatError, TemplateRaised, UnsupportedReason, classify_render_error, not_reproducible,
};
use super::literals::{PYDICT_FN, rewrite_dict_literals};
use super::messages::ContentFormat;
use super::pymethods::{py_formatter, py_strip, unknown_method};
use super::pyvalue::{PyDict, PyValue};
use super::tojson::tojson_filter;
use super::value::{dictsort_filter, items_filter, pydict_literal};

const NAME: &str = "chat_template";
/// What transformers appends to the final message to find where it ends.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// A compiled chat template and what vLLM derives from its source.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    content_format: ContentFormat,
    supports_developer: bool,
    variables: HashSet<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("content_format", &self.content_format)
            .field("supports_developer", &self.supports_developer)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` once; `format` overrides the detected content format.
    pub fn compile(source: &str, format: Option<ContentFormat>) -> Result<Self, ChatError> {
        // Jinja2's lexer turns every "\r\n" and "\r" into "\n".
        let normalized = source.replace("\r\n", "\n").replace('\r', "\n");
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(unknown_method);
        env.set_formatter(py_formatter);
        env.add_filter("tojson", tojson_filter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("items", items_filter);
        env.add_filter("dictsort", dictsort_filter);
        env.add_function(PYDICT_FN, pydict_literal);
        env.add_template_owned(NAME, rewrite_dict_literals(&normalized))
            .map_err(|e| {
                ChatError::unsupported(UnsupportedReason::TemplateSyntax, e.to_string())
            })?;
        let variables = env
            .get_template(NAME)
            .map(|t| t.undeclared_variables(false))
            .map_err(|e| ChatError::unsupported(UnsupportedReason::TemplateSyntax, e.to_string()))?
            .into_iter()
            .collect();
        Ok(ChatTemplate {
            content_format: format.unwrap_or_else(|| content_format::detect(&normalized)),
            supports_developer: source.contains("\"developer\"") || source.contains("'developer'"),
            env,
            source: normalized,
            variables,
        })
    }

    /// How message content must be shaped for this template.
    pub fn content_format(&self) -> ContentFormat {
        self.content_format
    }

    /// Whether the template names the `developer` role (vLLM then keeps it).
    pub fn supports_developer(&self) -> bool {
        self.supports_developer
    }

    /// Whether the template reads variable `name` from its context.
    pub fn uses_variable(&self, name: &str) -> bool {
        self.variables.contains(name)
    }

    /// Renders with `vars` as the context; with `continue_final_message`,
    /// the text is cut where the last message ends, as transformers does.
    pub fn render(
        &self,
        mut messages: Vec<PyDict>,
        vars: Vec<(String, Value)>,
        continue_final_message: bool,
    ) -> Result<String, ChatError> {
        let final_text = if continue_final_message {
            Some(self.mark_final_message(&mut messages)?)
        } else {
            None
        };
        let messages: Vec<Value> = messages.iter().map(super::value::dict_value).collect();
        let mut ctx: Vec<(String, Value)> = vars;
        ctx.push(("messages".into(), Value::from(messages)));
        let ctx: Value = ctx
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>()
            .into();
        let tmpl = self.env.get_template(NAME).map_err(|e| {
            ChatError::unsupported(UnsupportedReason::TemplateSyntax, e.to_string())
        })?;
        let rendered = tmpl.render(ctx).map_err(|e| classify_render_error(&e))?;
        match final_text {
            Some(text) => cut_at_tag(rendered, &text),
            None => Ok(rendered),
        }
    }

    /// Appends the tag to the final message's content (or its last text
    /// part) and returns the original text.
    fn mark_final_message(&self, messages: &mut [PyDict]) -> Result<String, ChatError> {
        let last = messages
            .last_mut()
            .ok_or_else(|| ChatError::invalid("continue_final_message needs a message"))?;
        if !self.source.contains("content") {
            return Err(ChatError::invalid(
                "continue_final_message is set but the template has no 'content' field",
            ));
        }
        match last.get("content").cloned() {
            Some(PyValue::Str(s)) => {
                last.insert("content", PyValue::Str(format!("{s}{CONTINUE_TAG}")));
                Ok(s)
            }
            Some(PyValue::List(mut parts)) => {
                for part in parts.iter_mut().rev() {
                    if let PyValue::Dict(d) = part
                        && let Some(PyValue::Str(t)) = d.get("text").cloned()
                    {
                        d.insert("text", PyValue::Str(format!("{t}{CONTINUE_TAG}")));
                        last.insert("content", PyValue::List(parts));
                        return Ok(t);
                    }
                }
                Err(ChatError::invalid(
                    "continue_final_message is set but the final message has no text to continue",
                ))
            }
            _ => Err(ChatError::invalid(
                "continue_final_message is set but the final message has no content",
            )),
        }
    }
}

/// transformers' cut: drop everything from the tag on; if the template
/// trimmed the tag's trailing space, also trim what precedes it.
fn cut_at_tag(rendered: String, final_text: &str) -> Result<String, ChatError> {
    let tag = CONTINUE_TAG.trim_end();
    if !rendered.contains(py_strip(final_text, None, true, true)) || !rendered.contains(tag) {
        return Err(ChatError::invalid(
            "continue_final_message is set but the final message does not appear in the chat \
             after applying the chat template",
        ));
    }
    let at = rendered.rfind(tag).unwrap_or(rendered.len());
    let mut out = rendered;
    if out[at..].starts_with(CONTINUE_TAG) {
        out.truncate(at);
    } else {
        out.truncate(at);
        let keep = py_strip(&out, None, false, true).len();
        out.truncate(keep);
    }
    Ok(out)
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(TemplateRaised(message)))
}

fn strftime_now(format: String) -> Result<Value, Error> {
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format))
        .map_err(|_| not_reproducible(format!("strftime format {format:?}")))?;
    Ok(Value::from(out))
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
