//! Chat requests to prompt token ids, exactly as vLLM's OpenAI server
//! makes them (vLLM 0.33, transformers 5.x): vLLM's normalization of the
//! request, the model's HF chat template rendered like transformers does,
//! then the tokenizer without special tokens.
//!
//! A single differing id loses every prefix-cache hit after it, so what we
//! cannot reproduce exactly is reported as [`ChatError::Unsupported`] (with
//! a metric and a warning) rather than approximated. See
//! `scripts/fixtures/README.md` for the vLLM rules followed here.

mod content_format;
mod de;
mod developer;
mod error;
mod jinja_scan;
mod literals;
mod messages;
mod normalize;
mod pyfmt;
mod pyjson;
mod pymethods;
mod pyvalue;
mod request;
mod template;
mod tojson;
mod tool_calls;
mod value;

use std::path::Path;

pub use de::DeError;
pub use error::{ChatError, UnsupportedReason};
pub use messages::ContentFormat;
pub use normalize::ServerSettings;
pub use pyjson::PyJsonError;
pub use pyvalue::{PyDict, PyInt, PyValue};
pub use request::{
    ChatMessage, ChatRequest, Field, FunctionDefinition, LaxBool, MessageContent, ReasoningEffort,
    RequestError, Tool,
};

use super::model_tokenizer::ChatTemplateField;
use super::{ModelTokenizer, TokenizeError};
use template::ChatTemplate;

/// transformers' `SPECIAL_TOKENS_ATTRIBUTES`: the named special tokens every
/// template sees as variables.
const SPECIAL_TOKEN_NAMES: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// A rendered chat prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedPrompt {
    /// The template's output (vLLM's `prompt`).
    pub text: String,
    /// The engine's prompt token ids.
    pub token_ids: Vec<u32>,
}

/// How the serving vLLM is configured, where it changes prompts.
#[derive(Debug, Clone, Default)]
pub struct ChatRendererOptions {
    /// `--chat-template` (template text or the name of a named template).
    pub chat_template: Option<String>,
    /// `--chat-template-content-format` when not `auto`.
    pub content_format: Option<ContentFormat>,
    /// Other server flags.
    pub server: ServerSettings,
    /// transformers' `special_tokens_map` (name → text). `None`: only
    /// `bos_token` / `eos_token` from the tokenizer config are known, and a
    /// template reading another one is reported unsupported.
    pub special_tokens: Option<Vec<(String, String)>>,
}

impl ChatRendererOptions {
    /// Reads the named special tokens from a model's `tokenizer_config.json`.
    pub fn special_tokens_from_config(path: &Path) -> Result<Vec<(String, String)>, TokenizeError> {
        let bytes = std::fs::read(path).map_err(|source| TokenizeError::Read {
            path: path.to_owned(),
            source,
        })?;
        let Ok(PyValue::Dict(cfg)) = pyjson::loads_bytes(&bytes) else {
            return Err(TokenizeError::Tokenizer(format!(
                "{} is not a JSON object",
                path.display()
            )));
        };
        let mut out = Vec::new();
        for name in SPECIAL_TOKEN_NAMES {
            let text = match cfg.get(name) {
                Some(PyValue::Str(s)) => Some(s.clone()),
                Some(PyValue::Dict(d)) => d
                    .get("content")
                    .and_then(PyValue::as_str)
                    .map(str::to_owned),
                _ => None,
            };
            if let Some(text) = text {
                out.push((name.to_owned(), text));
            }
        }
        Ok(out)
    }
}

/// The model's templates, compiled once.
#[derive(Debug)]
enum Templates {
    None,
    One(Box<ChatTemplate>),
    Named(Vec<(String, ChatTemplate)>),
}

/// Renders chat requests for one model.
pub struct ChatRenderer {
    tokenizer: ModelTokenizer,
    templates: Templates,
    /// `--chat-template`, compiled (when it is not a template name).
    server_template: Option<(String, Option<ChatTemplate>)>,
    content_format: Option<ContentFormat>,
    server: ServerSettings,
    special_tokens: Vec<(String, Option<String>)>,
}

impl std::fmt::Debug for ChatRenderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatRenderer")
            .field("templates", &self.templates)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl ChatRenderer {
    /// A renderer with vLLM's default server settings.
    pub fn new(tokenizer: ModelTokenizer) -> Result<Self, ChatError> {
        Self::with_options(tokenizer, ChatRendererOptions::default())
    }

    /// A renderer for a vLLM started with the given options. Fails when a
    /// template does not compile.
    pub fn with_options(
        tokenizer: ModelTokenizer,
        options: ChatRendererOptions,
    ) -> Result<Self, ChatError> {
        let format = options.content_format;
        let templates = match &tokenizer.config().chat_template {
            None => Templates::None,
            Some(ChatTemplateField::One(src)) => {
                Templates::One(Box::new(ChatTemplate::compile(src, format)?))
            }
            Some(ChatTemplateField::Named(list)) => Templates::Named(
                list.iter()
                    .map(|t| Ok((t.name.clone(), ChatTemplate::compile(&t.template, format)?)))
                    .collect::<Result<_, ChatError>>()?,
            ),
        };
        let server_template = match options.chat_template {
            None => None,
            Some(src) => {
                let named =
                    matches!(&templates, Templates::Named(l) if l.iter().any(|(n, _)| *n == src));
                let compiled = if named {
                    None
                } else {
                    Some(ChatTemplate::compile(&src, format)?)
                };
                Some((src, compiled))
            }
        };
        let config = tokenizer.config();
        let special_tokens = match options.special_tokens {
            Some(list) => list.into_iter().map(|(k, v)| (k, Some(v))).collect(),
            None => SPECIAL_TOKEN_NAMES
                .iter()
                .filter_map(|name| match *name {
                    "bos_token" => config
                        .bos_token
                        .clone()
                        .map(|t| (name.to_string(), Some(t))),
                    "eos_token" => config
                        .eos_token
                        .clone()
                        .map(|t| (name.to_string(), Some(t))),
                    _ => Some((name.to_string(), None)),
                })
                .collect(),
        };
        Ok(ChatRenderer {
            tokenizer,
            templates,
            server_template,
            content_format: format,
            server: options.server,
            special_tokens,
        })
    }

    /// Parses a request body (as vLLM's server does) and renders it.
    pub fn render_json(&self, body: &[u8]) -> Result<RenderedPrompt, ChatError> {
        self.render_json_bounded(body, usize::MAX)
    }

    /// [`render_json`](Self::render_json) that stops tokenizing once the
    /// prompt is known to have more than `max_tokens` tokens
    /// ([`TokenizeError::TooLong`](crate::TokenizeError::TooLong)).
    pub fn render_json_bounded(
        &self,
        body: &[u8],
        max_tokens: usize,
    ) -> Result<RenderedPrompt, ChatError> {
        self.render_read(ChatRequest::from_json(body), max_tokens)
    }

    /// [`render_json_bounded`](Self::render_json_bounded) of a body
    /// already split into its top-level entries (key, value as JSON text),
    /// in order: each value is parsed as vLLM's server parses it, once.
    pub fn render_entries_bounded<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
        max_tokens: usize,
    ) -> Result<RenderedPrompt, ChatError> {
        self.render_read(ChatRequest::from_json_entries(entries), max_tokens)
    }

    /// Renders a request just read, or counts why it could not be read.
    fn render_read(
        &self,
        read: Result<ChatRequest, RequestError>,
        max_tokens: usize,
    ) -> Result<RenderedPrompt, ChatError> {
        observe(
            read.map_err(ChatError::from)
                .and_then(|request| self.render_inner(&request, max_tokens)),
        )
    }

    /// The prompt text and ids vLLM would give the engine for `request`.
    /// Unsupported requests are counted
    /// (`prefix_router_chat_render_unsupported_total{reason}`) and logged.
    pub fn render(&self, request: &ChatRequest) -> Result<RenderedPrompt, ChatError> {
        observe(self.render_inner(request, usize::MAX))
    }

    fn render_inner(
        &self,
        request: &ChatRequest,
        max_tokens: usize,
    ) -> Result<RenderedPrompt, ChatError> {
        let prepared = normalize::prepare(request, &self.server)?;
        let owned;
        let template = match self.pick_template(&prepared)? {
            Picked::Borrowed(t) => t,
            Picked::Source(src) => {
                owned = ChatTemplate::compile(&src, self.content_format)?;
                &owned
            }
        };
        if request.messages.is_empty() {
            return Err(ChatError::invalid(
                "Cannot apply chat template to an empty conversation. Provide at least one message.",
            ));
        }
        let mut conversation = request
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| messages::convert(i, m, template.content_format()))
            .collect::<Result<Vec<_>, _>>()?;
        let has_developer = conversation
            .iter()
            .any(|m| m.get("role").and_then(PyValue::as_str) == Some("developer"));
        if has_developer && !template.supports_developer() {
            conversation = developer::developer_to_system(conversation)?;
        } else if has_developer
            && conversation
                .iter()
                .any(|m| m.get("tools").is_some_and(|t| !matches!(t, PyValue::Null)))
        {
            return Err(ChatError::unsupported(
                UnsupportedReason::RequestOption,
                "tools on developer messages",
            ));
        }
        let vars = normalize::template_vars(&prepared, template, &self.special_tokens)?;
        let cfm = normalize::continue_final_message(&prepared);
        let text = template.render(conversation, vars, cfm)?;
        let token_ids =
            self.tokenizer
                .encode_bounded(&text, prepared.add_special_tokens, max_tokens)?;
        Ok(RenderedPrompt { text, token_ids })
    }

    /// `resolve_chat_template` / `get_chat_template`: the request's
    /// template, the server's, the kwargs', then the model's (`tool_use`
    /// when there are tools, else `default`).
    fn pick_template(&self, prepared: &normalize::Prepared) -> Result<Picked<'_>, ChatError> {
        let by_name = |name: &str| match &self.templates {
            Templates::Named(list) => list.iter().find(|(n, _)| n == name).map(|(_, t)| t),
            _ => None,
        };
        if let Some(src) = &prepared.request_template {
            return Ok(by_name(src).map_or_else(|| Picked::Source(src.clone()), Picked::Borrowed));
        }
        if let Some((src, compiled)) = &self.server_template {
            return match (compiled, by_name(src)) {
                (_, Some(t)) | (Some(t), None) => Ok(Picked::Borrowed(t)),
                (None, None) => Ok(Picked::Source(src.clone())),
            };
        }
        if let Some(src) = &prepared.kwargs_template {
            return Ok(by_name(src).map_or_else(|| Picked::Source(src.clone()), Picked::Borrowed));
        }
        match &self.templates {
            Templates::One(t) => Ok(Picked::Borrowed(t)),
            Templates::Named(_) => {
                let name = if prepared.tools().is_some() && by_name("tool_use").is_some() {
                    "tool_use"
                } else {
                    "default"
                };
                by_name(name).map(Picked::Borrowed).ok_or_else(|| {
                    ChatError::unsupported(
                        UnsupportedReason::NoTemplate,
                        "no default named chat template",
                    )
                })
            }
            Templates::None => Err(ChatError::unsupported(
                UnsupportedReason::NoTemplate,
                "the tokenizer has no chat template",
            )),
        }
    }
}

/// Counts and logs what we cannot reproduce, so it is never hashed silently.
fn observe(result: Result<RenderedPrompt, ChatError>) -> Result<RenderedPrompt, ChatError> {
    if let Err(ChatError::Unsupported { reason, detail }) = &result {
        metrics::counter!(
            "prefix_router_chat_render_unsupported_total",
            "reason" => reason.as_str()
        )
        .increment(1);
        tracing::warn!(
            reason = reason.as_str(),
            %detail,
            "chat prompt cannot be reproduced exactly"
        );
    }
    result
}

enum Picked<'a> {
    Borrowed(&'a ChatTemplate),
    Source(String),
}
