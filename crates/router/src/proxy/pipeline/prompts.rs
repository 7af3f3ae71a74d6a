//! [`Prompts`]: from a request body to the routed model and the prompt's
//! block hashes ([`Chain`]), within `--max-prompt-tokens` (by default the
//! model's context length, from its files).
//!
//! This is the CPU-heavy part of routing (JSON, chat rendering, tokenizing,
//! hashing); the proxy runs it on its CPU pool (`cpu_pool`), never on the
//! async workers. A prompt over the limit is
//! refused as soon as that is known: from its length alone when the
//! tokenizer bounds tokens by bytes, else after the chunk that passed the
//! limit, so a huge prompt costs about the limit's worth of tokenizing.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokenize::{
    ChatError, CompletionPrompt, ModelPipeline, ModelPipelines, Resolved, TokenizeError,
};

use super::Endpoint;
use crate::proxy::ProxyError;
use crate::proxy::decision::{Chain, phase};
use crate::request::Request;
use crate::telemetry::SPANS;

/// A request read for routing: the request itself, its routed model and
/// its prompt's chain.
pub struct Parsed {
    /// The request, read once; what is handed on is written from it.
    pub request: Request,
    /// The routed model (the base of a LoRA adapter).
    pub model: String,
    pub chain: Chain,
    /// Whether the answer can move to another worker mid-stream, when
    /// migration is on (`migrate`; set by the pipeline).
    pub migration: Option<Result<crate::proxy::migrate::Eligible, &'static str>>,
}

/// The limit of a model without a context length of its own (no
/// tokenizer directory, or its files name none).
pub const DEFAULT_MAX_PROMPT_TOKENS: u64 = 1_000_000;

/// The models' pipelines and the prompt limit, shared with the pool's jobs.
pub struct Prompts {
    pipelines: ModelPipelines,
    /// `--max-prompt-tokens` when given; else each model's context length.
    max_tokens: Option<u64>,
    /// Prompts of at least this many tokens keep their token ids in their
    /// chain (for the LMCache controller's lookup); `None`: none do.
    keep_tokens_from: Option<u64>,
}

/// One request's prompt limit, in tokens.
#[derive(Clone, Copy)]
struct Limit(u64);

impl Limit {
    fn tokens(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }

    /// [`ProxyError::PromptTooLong`] when `tokens` is over the limit.
    fn check_len(self, tokens: usize) -> Result<(), ProxyError> {
        let tokens = u64::try_from(tokens).unwrap_or(u64::MAX);
        if tokens > self.0 {
            return Err(self.too_long(tokens));
        }
        Ok(())
    }

    fn too_long(self, tokens: u64) -> ProxyError {
        ProxyError::PromptTooLong {
            tokens,
            max: self.0,
        }
    }

    /// Maps a tokenizer's early stop to the 413 it means.
    fn tokenize_error(self, e: TokenizeError) -> ProxyError {
        match e {
            TokenizeError::TooLong { at_least, .. } => {
                self.too_long(u64::try_from(at_least).unwrap_or(u64::MAX))
            }
            other => ProxyError::Tokenize(other),
        }
    }
}

impl Prompts {
    /// Prompts limited to `max_tokens` when given, else to each model's
    /// context length ([`tokenize::context_length`], else
    /// [`DEFAULT_MAX_PROMPT_TOKENS`]).
    pub fn new(pipelines: ModelPipelines, max_tokens: Option<u64>) -> Arc<Self> {
        Arc::new(Prompts {
            pipelines,
            max_tokens,
            keep_tokens_from: None,
        })
    }

    /// The pipelines, for block sizes.
    pub fn pipelines(&self) -> &ModelPipelines {
        &self.pipelines
    }

    /// A copy with another prompt limit.
    pub fn with_max_tokens(&self, max_tokens: u64) -> Arc<Self> {
        Arc::new(Prompts {
            pipelines: self.pipelines.clone(),
            max_tokens: Some(max_tokens),
            keep_tokens_from: self.keep_tokens_from,
        })
    }

    /// A copy whose chains keep the token ids of prompts of at least
    /// `min` tokens.
    pub fn keeping_tokens_from(&self, min: u64) -> Arc<Self> {
        Arc::new(Prompts {
            pipelines: self.pipelines.clone(),
            max_tokens: self.max_tokens,
            keep_tokens_from: Some(min),
        })
    }

    /// The limit of a model with `pipeline`: the flag's, else its context.
    fn limit(&self, pipeline: Option<&ModelPipeline>) -> Limit {
        Limit(
            self.max_tokens
                .or_else(|| pipeline.and_then(|p| p.context_len))
                .unwrap_or(DEFAULT_MAX_PROMPT_TOKENS),
        )
    }

    /// The routed model and the prompt's chain of `request`.
    pub fn parse(&self, endpoint: Endpoint, mut request: Request) -> Result<Parsed, ProxyError> {
        // Owned: the chain takes the prompt's typed ids out of the request.
        let model = match &request.fields().model {
            Value::String(m) => m.clone(),
            _ => return Err(ProxyError::InvalidRequest("\"model\" is required".into())),
        };
        protocol::check_name("model", &model)
            .map_err(|e| ProxyError::InvalidRequest(e.to_string()))?;
        let resolved = self.pipelines.resolve(&model);
        let chain = self.chain(endpoint, &resolved, &mut request)?;
        Ok(Parsed {
            model: resolved.route_model.to_owned(),
            chain,
            request,
            migration: None,
        })
    }

    /// The prompt's block hashes, when the model's pipeline can compute them.
    fn chain(
        &self,
        endpoint: Endpoint,
        resolved: &Resolved<'_>,
        request: &mut Request,
    ) -> Result<Chain, ProxyError> {
        let block_size = resolved.pipeline.map_or(16, |p| p.hasher.block_size());
        let none = Chain {
            hashes: Vec::new(),
            prompt_tokens: 0,
            block_size,
            tokens: None,
        };
        let limit = self.limit(resolved.pipeline);
        let Some(pipeline) = resolved.pipeline else {
            // Without a tokenizer, only a token-id prompt can be measured.
            if endpoint == Endpoint::Completions
                && let Ok(CompletionPrompt::Tokens(ids)) = request.completion_prompt()
            {
                limit.check_len(ids.len())?;
            }
            return Ok(none);
        };
        let tokenize = Instant::now();
        let span = tracing::info_span!(target: SPANS, "tokenize").entered();
        let tokens = match endpoint {
            Endpoint::Completions => match request.completion_prompt()? {
                CompletionPrompt::Text(t) => pipeline
                    .tokenizer
                    .encode_bounded(&t, true, limit.tokens())
                    .map_err(|e| limit.tokenize_error(e))?,
                CompletionPrompt::Tokens(ids) => ids,
            },
            Endpoint::ChatCompletions => match self.chat_tokens(pipeline, request, limit)? {
                Some(ids) => ids,
                None => return Ok(none),
            },
            Endpoint::Other => return Ok(none),
        };
        limit.check_len(tokens.len())?;
        phase("tokenize", tokenize);
        span.exit();
        let hash = Instant::now();
        let hashes =
            tracing::info_span!(target: SPANS, "hash", tokens = tokens.len()).in_scope(|| {
                pipeline.block_hashes(
                    &tokens,
                    tokenize::cache_salt(&request.fields().cache_salt),
                    resolved.lora.clone(),
                )
            });
        phase("hash", hash);
        let prompt_tokens = tokens.len() as u64;
        let kept = self
            .keep_tokens_from
            .is_some_and(|min| prompt_tokens >= min)
            .then(|| Arc::new(tokens));
        Ok(Chain {
            hashes,
            prompt_tokens,
            block_size,
            tokens: kept,
        })
    }

    /// The prompt ids of a chat request. A request vLLM would reject is a
    /// 400; one the renderer cannot reproduce exactly (counted and logged by
    /// the renderer) is routed without prefix locality rather than hashed
    /// wrong.
    fn chat_tokens(
        &self,
        pipeline: &ModelPipeline,
        request: &Request,
        limit: Limit,
    ) -> Result<Option<Vec<u32>>, ProxyError> {
        let Some(renderer) = &pipeline.chat else {
            metrics::counter!("prefix_router_chat_render_unsupported_total", "reason" => "no_renderer")
                .increment(1);
            return Ok(None);
        };
        match renderer.render_entries_bounded(request.entries(), limit.tokens()) {
            Ok(prompt) => Ok(Some(prompt.token_ids)),
            Err(ChatError::Tokenize(e @ TokenizeError::TooLong { .. })) => {
                Err(limit.tokenize_error(e))
            }
            Err(e) if e.is_client_error() => Err(ProxyError::InvalidRequest(e.to_string())),
            Err(_) => Ok(None),
        }
    }
}
