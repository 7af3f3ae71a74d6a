//! The routing path: from an OpenAI request to the best worker's response.
//!
//! Tokenize the prompt as the engine does, hash its full blocks, look up
//! which live worker holds the longest prefix and how loaded each is, let
//! the policy rank them, claim the blocks for the first choice (one atomic
//! call that also counts the request in flight), and forward. A worker that
//! fails before answering is replaced by the next in the ranking. Without
//! Valkey, the last known workers are ranked by consistent hashing. A model
//! with prefill and decode workers is served disaggregated (`disagg`; the
//! endpoint picker's two picks: `pd_pick`; what both share: `pd_steps`).
//! Body fields only the router sets are taken out of a client's request
//! as it is read (`router_fields`); headers only the router sets
//! (`protocol::headers::RESERVED`) as it is sent (`forward`).
//! Before any of it, the request is admitted (`admit`) and passes flow
//! control's gate (`flow_gate`: it may wait while the workers are
//! saturated).

mod admit;
mod assign;
mod candidates;
mod cpu_pool;
mod disagg;
mod error;
mod explain;
mod flow_gate;
mod forward;
mod inflight;
mod orca;
mod outcome;
mod pd_bodies;
mod pd_pick;
mod pd_plan;
mod pd_steps;
mod pick;
mod prompts;
mod ranking;
mod router_fields;
mod worker_gauges;

pub use cpu_pool::{CpuPool, PoolBusy};
pub use error::ProxyError;
pub use forward::Upstream;
pub use inflight::InFlightGuard;
pub use pd_pick::PREFILLER_HEADER;
pub use pick::Pick;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use axum::http::{HeaderMap, Method};
use axum::response::Response;
use bytes::Bytes;

use crate::admission::Admission;
use crate::flow::FlowControl;
use crate::response_cache::{Lookup, ResponseCache, request_key};
use crate::routing::{CacheAwareConfig, Policy};
use crate::telemetry::{self, SPANS};
use protocol::headers::{ORCA_REQUEST_HEADER, ORCA_RESPONSE_HEADER};
use state::StateStore;
use tracing::Instrument;

use outcome::{decision, phase, record_outcome};
use prompts::{Chain, Parsed, Prompts};
use tokenize::ModelPipelines;

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
    /// Pipelines and the prompt limit, shared with the pool's jobs.
    prompts: Arc<Prompts>,
    /// Where prompts are tokenized and hashed.
    pool: CpuPool,
    policy: Arc<dyn Policy>,
    /// Set for the cache-aware policy: its first choice is made by the
    /// atomic routing script with these parameters.
    atomic: Option<CacheAwareConfig>,
    upstream: Upstream,
    max_attempts: usize,
    /// Last workers seen live per model, and when: the fallback when
    /// Valkey is away or has just restarted empty.
    known: RwLock<HashMap<String, SeenWorkers>>,
    /// How long a worker seen live stays a fallback target (a worker lease).
    known_for: std::time::Duration,
    /// Per-worker load gauges, from the decisions' views of the fleet.
    gauges: worker_gauges::WorkerGauges,
    /// Answers identical deterministic requests, when enabled.
    cache: Option<ResponseCache>,
    /// `--pd-skip-prefill-share`: a decode worker holding more of a prompt
    /// than this share computes it without a prefill worker.
    pd_skip_share: f64,
    /// `--pd-prefill-policy`: how a disaggregated request's prefill worker
    /// is chosen.
    pd_prefill: crate::routing::PrefillPolicy,
    /// Flow control, when on: the waiting room asked right before routing.
    flow: Option<Arc<FlowControl>>,
    /// Tenants, classes and their limits.
    admission: Arc<Admission>,
}

/// A client's request as admitted, on its way to routing.
struct Outgoing<'a> {
    method: &'a Method,
    path_and_query: &'a str,
    headers: &'a HeaderMap,
    body: Bytes,
    /// Flow control's leave to route it, held until it is counted in flight.
    flow: Option<crate::flow::Ticket>,
}

/// When a model's workers were last seen live, and their (id, url, role).
type SeenWorkers = (Instant, Vec<(String, String, protocol::WorkerRole)>);

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
            admission: Arc::new(Admission::new(Default::default(), store.clone())),
            store,
            prompts: Prompts::new(pipelines, None),
            pool: CpuPool::new(
                (std::thread::available_parallelism().map_or(2, usize::from) / 2).max(1),
                64,
            ),
            policy,
            atomic,
            upstream,
            max_attempts: max_attempts.max(1),
            known: RwLock::new(HashMap::new()),
            gauges: worker_gauges::WorkerGauges::default(),
            known_for: std::time::Duration::from_secs(15),
            cache: None,
            pd_skip_share: 0.8,
            pd_prefill: crate::routing::PrefillPolicy::default(),
            flow: None,
        }
    }

    /// Classifies and admits requests by `admission` (default: no limits).
    pub fn with_admission(mut self, admission: Arc<Admission>) -> Self {
        self.admission = admission;
        self
    }

    /// The admission step.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// Answers identical deterministic completions from `cache`, if any
    /// (none by default).
    pub fn with_response_cache(mut self, cache: Option<ResponseCache>) -> Self {
        self.cache = cache;
        self
    }

    /// Skips the prefill worker of a disaggregated request when the decode
    /// worker holds more than `share` of its prompt (default 0.8).
    pub fn with_pd_skip_prefill_share(mut self, share: f64) -> Self {
        self.pd_skip_share = share;
        self
    }

    /// Chooses a disaggregated request's prefill worker by `policy`
    /// (default: cache-aware).
    pub fn with_pd_prefill_policy(mut self, policy: crate::routing::PrefillPolicy) -> Self {
        self.pd_prefill = policy;
        self
    }

    /// Keeps workers seen live as fallback targets for `d` (the worker
    /// lease: after it, a worker that stopped heartbeating is gone).
    pub fn with_known_for(mut self, d: std::time::Duration) -> Self {
        self.known_for = d;
        self
    }

    /// Refuses prompts of more than `max` tokens with
    /// [`ProxyError::PromptTooLong`] (unless set: each model's context
    /// length from its files, else 1,000,000). Tokenizing and
    /// hashing cost time and memory in the prompt's length, and the claim
    /// writes one entry per block: a limit keeps one request from holding a
    /// router or flooding the shared state.
    pub fn with_max_prompt_tokens(mut self, max: u64) -> Self {
        self.prompts = self.prompts.with_max_tokens(max);
        self
    }

    /// Tokenizes and hashes prompts on `pool` (default: large prompts on
    /// half the cores, 64 waiting).
    pub fn with_cpu_pool(mut self, pool: CpuPool) -> Self {
        self.pool = pool;
        self
    }

    /// Whether any worker was seen live (the fallback has somewhere to go).
    pub fn knows_workers(&self) -> bool {
        self.known
            .read()
            .is_ok_and(|k| k.values().any(|(_, workers)| !workers.is_empty()))
    }

    /// Reads `body` on the pool: the routed model, the prompt's chain and
    /// whether the answer is streamed. The pool's thread works within the
    /// caller's span (its `tokenize` and `hash` spans nest there).
    async fn read(&self, endpoint: Endpoint, body: &Bytes) -> Result<Parsed, ProxyError> {
        let (prompts, body) = (self.prompts.clone(), body.clone());
        let span = tracing::Span::current();
        self.pool
            .run(body.len(), move || {
                span.in_scope(|| prompts.parse(endpoint, &body))
            })
            .await?
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
        self.route_and_forward(endpoint, method, path_and_query, headers, body)
            .instrument(telemetry::route_span(headers))
            .await
    }

    async fn route_and_forward(
        &self,
        endpoint: Endpoint,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response, ProxyError> {
        let started = Instant::now();
        let miss = match self.cache.as_ref() {
            Some(cache) if endpoint != Endpoint::Other => {
                match self
                    .cache_lookup(cache, path_and_query, headers, &body)
                    .await
                {
                    Lookup::Hit(resp) => return Ok(resp),
                    Lookup::Miss(miss) => Some((cache, miss)),
                    Lookup::Bypass => None,
                }
            }
            _ => None,
        };
        let mut parsed = self.read(endpoint, &body).await?;
        let body = parsed.without_router_fields.take().unwrap_or(body);
        let admitted = self.admit(headers, &parsed, &body).await?;
        let body = self.with_priority(endpoint, &admitted, body);
        let flow = self.flow_admit(&parsed.model, &admitted.class).await?;
        let out = Outgoing {
            method,
            path_and_query,
            headers,
            body,
            flow,
        };
        let resp = self
            .forward_parsed(endpoint, out, parsed, miss, started)
            .await?;
        Ok(admitted.attach(resp))
    }

    /// Routes and forwards an admitted request.
    async fn forward_parsed(
        &self,
        endpoint: Endpoint,
        out: Outgoing<'_>,
        parsed: Parsed,
        miss: Option<(&ResponseCache, crate::response_cache::Miss)>,
        started: Instant,
    ) -> Result<Response, ProxyError> {
        let Outgoing {
            method,
            path_and_query,
            headers,
            body,
            flow,
        } = out;
        let Parsed {
            model,
            chain,
            streamed,
            ..
        } = parsed;
        tracing::Span::current().record("model", model.as_str());
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
        if endpoint != Endpoint::Other && self.may_disaggregate(&model) {
            let out = disagg::Outgoing {
                method,
                path_and_query,
                headers: &headers,
                body: &body,
                strip: asked_orca.then_some(ORCA_RESPONSE_HEADER),
            };
            if let Some(resp) = self
                .serve_disaggregated(&model, &chain, &out, started)
                .await?
            {
                return Ok(match miss {
                    Some((cache, miss)) => cache.record(miss, resp),
                    None => resp,
                });
            }
        }
        let valkey = Instant::now();
        let (ranked, tracked) = self
            .rank(&model, &chain)
            .instrument(tracing::info_span!(target: SPANS, "valkey"))
            .await?;
        phase("valkey", valkey);
        // Routed (counted in flight): a dispatched request's place goes back.
        drop(flow);
        metrics::counter!("prefix_router_decisions_total", "outcome" => decision(&ranked, tracked))
            .increment(1);
        let mut last_error = String::from("no live worker");
        for target in ranked.iter().take(self.max_attempts) {
            let worker = &target.candidate.worker_id;
            let counted = self.count(&model, target, &chain, tracked).await;
            let guard = InFlightGuard::new(self.store.clone(), &model, worker, counted);
            metrics::histogram!("prefix_router_route_seconds")
                .record(started.elapsed().as_secs_f64());
            let upstream = tracing::info_span!(target: SPANS, "upstream", otel.kind = "client", worker = %worker);
            telemetry::hand_on(&upstream, &mut headers);
            match self
                .upstream
                .send(method, &target.url, path_and_query, &headers, body.clone())
                .instrument(upstream)
                .await
            {
                Ok(resp) => {
                    tracing::Span::current().record("worker", worker.as_str());
                    record_outcome(&model, target, &chain);
                    self.record_orca_load(&model, worker, &resp);
                    let strip = asked_orca.then_some(ORCA_RESPONSE_HEADER);
                    let resp = forward::relay(resp, worker, guard, strip);
                    return Ok(match miss {
                        Some((cache, miss)) => cache.record(miss, resp),
                        None => resp,
                    });
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

    /// The cache's answer to a completion: its key is computed on the pool
    /// (a JSON parse), the model named by its routed model (an adapter's
    /// base), so that adapters share their base model's budget.
    async fn cache_lookup(
        &self,
        cache: &ResponseCache,
        path_and_query: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Lookup {
        let (path, body_copy) = (path_and_query.to_owned(), body.clone());
        let auth = headers
            .get(axum::http::header::AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec());
        let prompts = self.prompts.clone();
        let key = self
            .pool
            .run(body.len(), move || {
                request_key(&path, auth.as_deref(), &body_copy).map(|mut k| {
                    k.model = prompts.pipelines().resolve(&k.model).route_model.to_owned();
                    k
                })
            })
            .await;
        match key {
            Ok(Ok(key)) => cache.lookup(key).await,
            Ok(Err(why)) => {
                cache.skipped(why);
                Lookup::Bypass
            }
            // The pool is full: parsing now would only delay the routing.
            Err(_) => Lookup::Bypass,
        }
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
}
