//! [`Prompts`]: from a request body to the routed model and the prompt's
//! block hashes ([`Chain`]), within `--max-prompt-tokens`.
//!
//! This is the CPU-heavy part of routing (JSON, chat rendering, tokenizing,
//! hashing); [`Proxy`](super::Proxy) runs it on its [`CpuPool`]
//! (super::CpuPool), never on the async workers. A prompt over the limit is
//! refused as soon as that is known: from its length alone when the
//! tokenizer bounds tokens by bytes, else after the chunk that passed the
//! limit, so a huge prompt costs about the limit's worth of tokenizing.

use std::sync::Arc;
use std::time::Instant;

use protocol::hashing::BlockHash;
use serde::Deserialize;
use serde_json::Value;
use tokenize::{
    ChatError, CompletionPrompt, InvalidPrompt, ModelPipeline, ModelPipelines, PromptField,
    Resolved, TokenizeError,
};

use super::{Endpoint, ProxyError, phase};
use crate::telemetry::SPANS;

/// A request's prompt, reduced to what routing needs.
pub(super) struct Chain {
    pub(super) hashes: Vec<BlockHash>,
    pub(super) prompt_tokens: u64,
}

/// What a request's body says for routing.
pub(super) struct Parsed {
    /// The routed model (the base of a LoRA adapter).
    pub(super) model: String,
    pub(super) chain: Chain,
    /// Whether the answer is streamed.
    pub(super) streamed: bool,
    /// The body's `user`, when a string (a possible tenant source).
    pub(super) user: Option<String>,
    /// The body's `max_tokens` (or `max_completion_tokens`), when a number.
    pub(super) max_tokens: Option<u64>,
}

/// The fields of a body that routing reads; the rest is only checked to be
/// JSON (it is forwarded as sent). Reading these alone, not the whole body
/// as a `Value`, halves the parse of a long token-id prompt.
#[derive(Deserialize)]
struct Fields {
    #[serde(default)]
    model: Value,
    #[serde(default)]
    stream: Value,
    #[serde(default)]
    cache_salt: Value,
    #[serde(default)]
    user: Value,
    #[serde(default)]
    max_tokens: Value,
    #[serde(default)]
    max_completion_tokens: Value,
    /// Completions only (a chat body is rendered from its own parse).
    #[serde(default)]
    prompt: Option<PromptField>,
}

impl Fields {
    /// The completions prompt (taken out), or why it is not one vLLM accepts.
    fn take_completion_prompt(&mut self) -> Result<CompletionPrompt, InvalidPrompt> {
        match self.prompt.take() {
            None => Err(InvalidPrompt("prompt is required".into())),
            Some(PromptField(p)) => p,
        }
    }
}

/// The models' pipelines and the prompt limit, shared with the pool's jobs.
pub(super) struct Prompts {
    pipelines: ModelPipelines,
    max_tokens: u64,
}

impl Prompts {
    pub(super) fn new(pipelines: ModelPipelines, max_tokens: u64) -> Arc<Self> {
        Arc::new(Prompts {
            pipelines,
            max_tokens,
        })
    }

    /// The pipelines, for block sizes.
    pub(super) fn pipelines(&self) -> &ModelPipelines {
        &self.pipelines
    }

    /// A copy with another prompt limit.
    pub(super) fn with_max_tokens(&self, max_tokens: u64) -> Arc<Self> {
        Prompts::new(self.pipelines.clone(), max_tokens)
    }

    fn limit(&self) -> usize {
        usize::try_from(self.max_tokens).unwrap_or(usize::MAX)
    }

    /// [`ProxyError::PromptTooLong`] when `tokens` is over the limit.
    fn check_len(&self, tokens: usize) -> Result<(), ProxyError> {
        let tokens = u64::try_from(tokens).unwrap_or(u64::MAX);
        if tokens > self.max_tokens {
            return Err(self.too_long(tokens));
        }
        Ok(())
    }

    fn too_long(&self, tokens: u64) -> ProxyError {
        ProxyError::PromptTooLong {
            tokens,
            max: self.max_tokens,
        }
    }

    /// Maps a tokenizer's early stop to the 413 it means.
    fn tokenize_error(&self, e: TokenizeError) -> ProxyError {
        match e {
            TokenizeError::TooLong { at_least, .. } => {
                self.too_long(u64::try_from(at_least).unwrap_or(u64::MAX))
            }
            other => ProxyError::Tokenize(other),
        }
    }

    /// The routed model, the prompt's chain and whether the response is
    /// streamed.
    pub(super) fn parse(&self, endpoint: Endpoint, body: &[u8]) -> Result<Parsed, ProxyError> {
        if body.is_empty() {
            return Err(ProxyError::InvalidRequest("\"model\" is required".into()));
        }
        let mut fields: Fields = serde_json::from_slice(body)
            .map_err(|e| ProxyError::InvalidRequest(format!("invalid JSON body: {e}")))?;
        let model = match fields.model.take() {
            Value::String(m) => m,
            _ => return Err(ProxyError::InvalidRequest("\"model\" is required".into())),
        };
        protocol::check_name("model", &model)
            .map_err(|e| ProxyError::InvalidRequest(e.to_string()))?;
        let resolved = self.pipelines.resolve(&model);
        let chain = self.chain(endpoint, &resolved, &mut fields, body)?;
        Ok(Parsed {
            model: resolved.route_model.to_owned(),
            chain,
            streamed: fields.stream == true,
            user: fields.user.as_str().map(str::to_owned),
            max_tokens: fields
                .max_tokens
                .as_u64()
                .or(fields.max_completion_tokens.as_u64()),
        })
    }

    /// The prompt's block hashes, when the model's pipeline can compute them.
    fn chain(
        &self,
        endpoint: Endpoint,
        resolved: &Resolved<'_>,
        fields: &mut Fields,
        body: &[u8],
    ) -> Result<Chain, ProxyError> {
        let none = Chain {
            hashes: Vec::new(),
            prompt_tokens: 0,
        };
        let Some(pipeline) = resolved.pipeline else {
            // Without a tokenizer, only a token-id prompt can be measured.
            if endpoint == Endpoint::Completions
                && let Ok(CompletionPrompt::Tokens(ids)) = fields.take_completion_prompt()
            {
                self.check_len(ids.len())?;
            }
            return Ok(none);
        };
        let tokenize = Instant::now();
        let span = tracing::info_span!(target: SPANS, "tokenize").entered();
        let tokens = match endpoint {
            Endpoint::Completions => match fields.take_completion_prompt()? {
                CompletionPrompt::Text(t) => pipeline
                    .tokenizer
                    .encode_bounded(&t, true, self.limit())
                    .map_err(|e| self.tokenize_error(e))?,
                CompletionPrompt::Tokens(ids) => ids,
            },
            Endpoint::ChatCompletions => match self.chat_tokens(pipeline, body)? {
                Some(ids) => ids,
                None => return Ok(none),
            },
            Endpoint::Other => return Ok(none),
        };
        self.check_len(tokens.len())?;
        phase("tokenize", tokenize);
        span.exit();
        let hash = Instant::now();
        let hashes =
            tracing::info_span!(target: SPANS, "hash", tokens = tokens.len()).in_scope(|| {
                pipeline.block_hashes(
                    &tokens,
                    tokenize::cache_salt(&fields.cache_salt),
                    resolved.lora.clone(),
                )
            });
        phase("hash", hash);
        Ok(Chain {
            hashes,
            prompt_tokens: tokens.len() as u64,
        })
    }

    /// The prompt ids of a chat request. A request vLLM would reject is a
    /// 400; one the renderer cannot reproduce exactly (counted and logged by
    /// the renderer) is routed without prefix locality rather than hashed
    /// wrong.
    fn chat_tokens(
        &self,
        pipeline: &ModelPipeline,
        body: &[u8],
    ) -> Result<Option<Vec<u32>>, ProxyError> {
        let Some(renderer) = &pipeline.chat else {
            metrics::counter!("prefix_router_chat_render_unsupported_total", "reason" => "no_renderer")
                .increment(1);
            return Ok(None);
        };
        match renderer.render_json_bounded(body, self.limit()) {
            Ok(prompt) => Ok(Some(prompt.token_ids)),
            Err(ChatError::Tokenize(e @ TokenizeError::TooLong { .. })) => {
                Err(self.tokenize_error(e))
            }
            Err(e) if e.is_client_error() => Err(ProxyError::InvalidRequest(e.to_string())),
            Err(_) => Ok(None),
        }
    }
}
