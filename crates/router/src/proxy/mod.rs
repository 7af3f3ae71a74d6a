//! The routing path: from an OpenAI request to the best worker's response.
//!
//! Tokenize the prompt as the engine does, hash its full blocks, look up
//! which live worker holds the longest prefix and how loaded each is, let
//! the policy rank them, claim the blocks for the first choice (one atomic
//! call that also counts the request in flight), and forward. A worker that
//! fails before answering is replaced by the next in the ranking. Without
//! Valkey, the last known workers are ranked by consistent hashing.

mod candidates;
mod error;
mod explain;
mod forward;
mod inflight;
mod orca;
mod ranking;

pub use error::ProxyError;
pub use forward::Upstream;
pub use inflight::InFlightGuard;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use axum::http::{HeaderMap, Method};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use crate::routing::{CacheAwareConfig, Policy};
use protocol::hashing::BlockHash;
use protocol::headers::{ORCA_REQUEST_HEADER, ORCA_RESPONSE_HEADER};
use state::StateStore;

use candidates::Target;
use tokenize::{CompletionPrompt, ModelPipeline, ModelPipelines, Resolved, completion_prompt};

/// Which OpenAI endpoint a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// Any other `/v1/*` route: forwarded to a worker of the model, by load.
    Other,
}

/// The routing path, shared by all requests.
pub struct Proxy {
    store: StateStore,
    pipelines: ModelPipelines,
    policy: Arc<dyn Policy>,
    /// Set for the cache-aware policy: its first choice is made by the
    /// atomic routing script with these parameters.
    atomic: Option<CacheAwareConfig>,
    upstream: Upstream,
    max_attempts: usize,
    /// Longest prompt routed, in tokens (`--max-prompt-tokens`).
    max_prompt_tokens: u64,
    /// Last workers seen live per model, and when: the fallback when
    /// Valkey is away or has just restarted empty.
    known: RwLock<HashMap<String, SeenWorkers>>,
    /// How long a worker seen live stays a fallback target (a worker lease).
    known_for: std::time::Duration,
}

/// When a model's workers were last seen live, and their (id, url).
type SeenWorkers = (Instant, Vec<(String, String)>);

/// A request's prompt, reduced to what routing needs.
struct Chain {
    hashes: Vec<BlockHash>,
    prompt_tokens: u64,
}

impl Proxy {
    /// A proxy over `store` with `policy`, trying at most `max_attempts` workers.
    pub fn new(
        store: StateStore,
        pipelines: ModelPipelines,
        policy: Arc<dyn Policy>,
        atomic: Option<CacheAwareConfig>,
        upstream: Upstream,
        max_attempts: usize,
    ) -> Self {
        Proxy {
            store,
            pipelines,
            policy,
            atomic,
            upstream,
            max_attempts: max_attempts.max(1),
            max_prompt_tokens: u64::MAX,
            known: RwLock::new(HashMap::new()),
            known_for: std::time::Duration::from_secs(15),
        }
    }

    /// Keeps workers seen live as fallback targets for `d` (the worker
    /// lease: after it, a worker that stopped heartbeating is gone).
    pub fn with_known_for(mut self, d: std::time::Duration) -> Self {
        self.known_for = d;
        self
    }

    /// Refuses prompts of more than `max` tokens with
    /// [`ProxyError::PromptTooLong`] (unlimited unless set). Tokenizing and
    /// hashing cost time and memory in the prompt's length, and the claim
    /// writes one entry per block: a limit keeps one request from holding a
    /// router or flooding the shared state.
    pub fn with_max_prompt_tokens(mut self, max: u64) -> Self {
        self.max_prompt_tokens = max;
        self
    }

    /// [`ProxyError::PromptTooLong`] when `tokens` is over the limit.
    fn check_prompt_len(&self, tokens: usize) -> Result<(), ProxyError> {
        let tokens = u64::try_from(tokens).unwrap_or(u64::MAX);
        if tokens > self.max_prompt_tokens {
            return Err(ProxyError::PromptTooLong {
                tokens,
                max: self.max_prompt_tokens,
            });
        }
        Ok(())
    }

    /// Routes and forwards one request; `body` is forwarded unchanged.
    pub async fn handle(
        &self,
        endpoint: Endpoint,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response, ProxyError> {
        let started = Instant::now();
        let (model, chain, streamed) = self.parse(endpoint, &body)?;
        // Ask non-streamed completions for vLLM's load report (ORCA),
        // unless the client asked itself.
        let asked_orca =
            endpoint != Endpoint::Other && !streamed && !headers.contains_key(ORCA_REQUEST_HEADER);
        let mut headers = headers.clone();
        if asked_orca {
            headers.insert(
                ORCA_REQUEST_HEADER,
                axum::http::HeaderValue::from_static("TEXT"),
            );
        }
        let valkey = Instant::now();
        let (ranked, tracked) = self.rank(&model, &chain).await?;
        phase("valkey", valkey);
        metrics::counter!("prefix_router_decisions_total", "outcome" => decision(&ranked, tracked))
            .increment(1);
        let mut last_error = String::from("no live worker");
        for target in ranked.iter().take(self.max_attempts) {
            let worker = &target.candidate.worker_id;
            let counted = target.assigned || (tracked && self.assign(&model, target, &chain).await);
            let guard = InFlightGuard::new(self.store.clone(), &model, worker, counted);
            metrics::histogram!("prefix_router_route_seconds")
                .record(started.elapsed().as_secs_f64());
            match self
                .upstream
                .send(method, &target.url, path_and_query, &headers, body.clone())
                .await
            {
                Ok(resp) => {
                    record_outcome(&model, target, &chain);
                    self.record_orca_load(&model, worker, &resp);
                    let strip = asked_orca.then_some(ORCA_RESPONSE_HEADER);
                    return Ok(forward::relay(resp, worker, guard, strip));
                }
                Err(e) => {
                    tracing::warn!(worker, error = %e, "worker failed before answering; trying the next");
                    metrics::counter!("prefix_router_upstream_retries_total").increment(1);
                    last_error = format!("{worker}: {e}");
                }
            }
        }
        Err(if ranked.is_empty() {
            ProxyError::UnknownModel(model)
        } else {
            ProxyError::NoWorker(last_error)
        })
    }

    /// The routed model (the base of a LoRA adapter), the prompt's chain, and
    /// whether the response is streamed.
    fn parse(&self, endpoint: Endpoint, body: &[u8]) -> Result<(String, Chain, bool), ProxyError> {
        let json: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ProxyError::InvalidRequest(format!("invalid JSON body: {e}")))?
        };
        let model = json
            .get("model")
            .and_then(Value::as_str)
            .ok_or_else(|| ProxyError::InvalidRequest("\"model\" is required".into()))?;
        protocol::check_name("model", model)
            .map_err(|e| ProxyError::InvalidRequest(e.to_string()))?;
        let resolved = self.pipelines.resolve(model);
        let chain = self.chain(endpoint, &resolved, &json, body)?;
        Ok((
            resolved.route_model.to_owned(),
            chain,
            json["stream"] == true,
        ))
    }

    /// The prompt's block hashes, when the model's pipeline can compute them.
    fn chain(
        &self,
        endpoint: Endpoint,
        resolved: &Resolved<'_>,
        json: &Value,
        body: &[u8],
    ) -> Result<Chain, ProxyError> {
        let none = Chain {
            hashes: Vec::new(),
            prompt_tokens: 0,
        };
        let Some(pipeline) = resolved.pipeline else {
            // Without a tokenizer, only a token-id prompt can be measured.
            if endpoint == Endpoint::Completions
                && let Ok(CompletionPrompt::Tokens(ids)) = completion_prompt(json)
            {
                self.check_prompt_len(ids.len())?;
            }
            return Ok(none);
        };
        let tokenize = Instant::now();
        let tokens = match endpoint {
            Endpoint::Completions => match completion_prompt(json)? {
                CompletionPrompt::Text(t) => pipeline.tokenizer.encode(&t, true)?,
                CompletionPrompt::Tokens(ids) => ids,
            },
            Endpoint::ChatCompletions => match chat_tokens(pipeline, body)? {
                Some(ids) => ids,
                None => return Ok(none),
            },
            Endpoint::Other => return Ok(none),
        };
        self.check_prompt_len(tokens.len())?;
        phase("tokenize", tokenize);
        let hash = Instant::now();
        let hashes =
            pipeline.block_hashes(&tokens, tokenize::cache_salt(json), resolved.lora.clone());
        phase("hash", hash);
        Ok(Chain {
            hashes,
            prompt_tokens: tokens.len() as u64,
        })
    }

    /// Records the load a worker reported in its response, off the request path.
    fn record_orca_load(&self, model: &str, worker: &str, resp: &reqwest::Response) {
        let Some(load) = resp
            .headers()
            .get(ORCA_RESPONSE_HEADER)
            .and_then(|h| h.to_str().ok())
            .and_then(orca::parse)
        else {
            return;
        };
        let (store, model, worker) = (self.store.clone(), model.to_owned(), worker.to_owned());
        tokio::spawn(async move {
            let waiting = load.num_requests_waiting.map(|w| w.round() as u64);
            if let Err(e) = store
                .report_load(&model, &worker, waiting, None, load.kv_cache_usage_perc)
                .await
            {
                tracing::debug!(error = %e, "ORCA load not recorded");
            }
        });
    }

    /// Claims the blocks the target does not hold and counts the request;
    /// false when that failed (the request still goes, untracked).
    async fn assign(&self, model: &str, target: &Target, chain: &Chain) -> bool {
        let unheld = chain
            .hashes
            .get(target.matched_blocks..)
            .unwrap_or_default();
        match self
            .store
            .assign(model, &target.candidate.worker_id, unheld)
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "claim failed; request forwarded untracked");
                false
            }
        }
    }
}

/// The prompt ids of a chat request. A request vLLM would reject is a 400;
/// one the renderer cannot reproduce exactly (counted and logged by the
/// renderer) is routed without prefix locality rather than hashed wrong.
fn chat_tokens(pipeline: &ModelPipeline, body: &[u8]) -> Result<Option<Vec<u32>>, ProxyError> {
    let Some(renderer) = &pipeline.chat else {
        metrics::counter!("prefix_router_chat_render_unsupported_total", "reason" => "no_renderer")
            .increment(1);
        return Ok(None);
    };
    match renderer.render_json(body) {
        Ok(prompt) => Ok(Some(prompt.token_ids)),
        Err(e) if e.is_client_error() => Err(ProxyError::InvalidRequest(e.to_string())),
        Err(_) => Ok(None),
    }
}

/// How a decision went: `hit` (the chosen worker holds part of the prompt),
/// `spill` (another worker held more, but load ruled it out), `miss`
/// (nobody held any), `fallback` (Valkey unreachable).
fn decision(ranked: &[Target], tracked: bool) -> &'static str {
    let Some(first) = ranked.first() else {
        return "no_worker";
    };
    if !tracked {
        "fallback"
    } else if ranked
        .iter()
        .any(|t| t.matched_blocks > first.matched_blocks)
    {
        "spill"
    } else if first.matched_blocks > 0 {
        "hit"
    } else {
        "miss"
    }
}

/// Records the time of one routing phase since `since`.
fn phase(name: &'static str, since: Instant) {
    metrics::histogram!("prefix_router_route_phase_seconds", "phase" => name)
        .record(since.elapsed().as_secs_f64());
}

fn record_outcome(model: &str, target: &Target, chain: &Chain) {
    metrics::counter!("prefix_router_requests_total", "model" => model.to_owned()).increment(1);
    if chain.prompt_tokens > 0 {
        let ratio = target.candidate.cached_tokens as f64 / chain.prompt_tokens as f64;
        metrics::histogram!("prefix_router_routed_prefix_ratio").record(ratio.min(1.0));
    }
}
