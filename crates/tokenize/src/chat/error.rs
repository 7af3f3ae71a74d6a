//! [`ChatError`]: why a chat request got no prompt ids.
//!
//! The caller must tell a bad request (answer 4xx, as vLLM would) from a
//! request vLLM accepts but whose prompt we cannot reproduce exactly (route
//! it without a prefix hash, count it, log it), so these are separate.

use super::pyjson::PyJsonError;
use super::request::RequestError;
use crate::TokenizeError;

/// Why [`super::ChatRenderer::render`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// Malformed, or a request vLLM itself rejects (HTTP 400).
    #[error("invalid chat request: {0}")]
    Invalid(String),
    /// vLLM would accept the request but we cannot produce its exact prompt.
    #[error("cannot reproduce vLLM's prompt ({}): {detail}", reason.as_str())]
    Unsupported {
        /// Low-cardinality label for metrics.
        reason: UnsupportedReason,
        /// Human-readable detail for logs.
        detail: String,
    },
    /// The tokenizer failed on the rendered text.
    #[error(transparent)]
    Tokenize(#[from] TokenizeError),
}

impl From<RequestError> for ChatError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::Json(PyJsonError::TooDeep) => {
                ChatError::unsupported(UnsupportedReason::JsonDepth, e.to_string())
            }
            other => ChatError::invalid(other.to_string()),
        }
    }
}

impl ChatError {
    /// Whether the client is at fault (answer 4xx).
    pub fn is_client_error(&self) -> bool {
        matches!(self, ChatError::Invalid(_))
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        ChatError::Invalid(msg.into())
    }

    pub(crate) fn unsupported(reason: UnsupportedReason, detail: impl Into<String>) -> Self {
        ChatError::Unsupported {
            reason,
            detail: detail.into(),
        }
    }
}

/// What we cannot reproduce; the `reason` label of
/// `prefix_router_chat_render_unsupported_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsupportedReason {
    /// Image, audio, video or embedding content parts.
    MediaContent,
    /// The template uses something our Jinja engine does not reproduce.
    TemplateFeature,
    /// The template does not compile here.
    TemplateSyntax,
    /// The model has no chat template we can use.
    NoTemplate,
    /// A request option that changes the ids in ways we do not follow
    /// (`truncate_prompt_tokens`, forwarded prompt ids, `tokenize`, ...).
    RequestOption,
    /// The template reads a special token that we were not told about.
    SpecialToken,
    /// JSON nested beyond our limit.
    JsonDepth,
}

impl UnsupportedReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            UnsupportedReason::MediaContent => "media_content",
            UnsupportedReason::TemplateFeature => "template_feature",
            UnsupportedReason::TemplateSyntax => "template_syntax",
            UnsupportedReason::NoTemplate => "no_template",
            UnsupportedReason::RequestOption => "request_option",
            UnsupportedReason::SpecialToken => "special_token",
            UnsupportedReason::JsonDepth => "json_depth",
        }
    }
}

/// Attached to template errors we raise because Python would print
/// something we cannot reproduce.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct NotReproducible(pub String);

/// Attached to the error of the template's `raise_exception(...)`: the
/// template itself rejects the request, as it would under vLLM.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TemplateRaised(pub String);

/// A template error meaning "Python would do this differently".
pub(crate) fn not_reproducible(msg: impl Into<String>) -> minijinja::Error {
    let msg = msg.into();
    minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg.clone())
        .with_source(NotReproducible(msg))
}

/// Sorts a failed render into "the template refused" or "we cannot follow".
pub(crate) fn classify_render_error(err: &minijinja::Error) -> ChatError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<TemplateRaised>() {
            return ChatError::invalid(format!("chat template rejected the request: {}", raised.0));
        }
        if let Some(nr) = e.downcast_ref::<NotReproducible>() {
            return ChatError::unsupported(UnsupportedReason::TemplateFeature, nr.0.clone());
        }
        source = e.source();
    }
    ChatError::unsupported(
        UnsupportedReason::TemplateFeature,
        format!("template error: {err}"),
    )
}
