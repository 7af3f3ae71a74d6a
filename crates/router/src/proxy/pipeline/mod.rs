//! The request pipeline of `serve`: a client's request read once on the
//! CPU pool into a [`Request`] (`crate::request`; the fields only the
//! router sets taken out), its routed model and prompt's chain
//! (`prompts`), answered
//! from the response cache when it can be, admitted (`admit`), passed
//! through flow control's gate (`flow_gate`), decided (`decision`) and
//! forwarded (`forward`), disaggregated when the model is (`pd`). The
//! endpoint picker's pick (`pick`) runs the same steps up to the decision.

mod admit;
mod flow_gate;
mod prompts;

pub use admit::{admit, explain_admission, with_priority};
pub use flow_gate::flow_admit;
pub use prompts::{Parsed, Prompts};

use std::sync::Arc;
use std::time::Instant;

use axum::http::{HeaderMap, Method};
use axum::response::Response;
use bytes::Bytes;
use tracing::Instrument;

use super::decision::{decision, phase, record_outcome};
use super::{InFlightGuard, Proxy, ProxyError, migrate, orca, pd};
use crate::request::Request;
use crate::response_cache::{Ineligible, Lookup, Miss, RequestKey, ResponseCache, request_key};
use crate::telemetry::{self, SPANS};
use protocol::headers::{ORCA_REQUEST_HEADER, ORCA_RESPONSE_HEADER};

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

impl Endpoint {
    /// A completions or chat request, told apart by `messages`.
    pub fn of_body(request: &Request) -> Endpoint {
        match request.raw("messages") {
            Some(_) => Endpoint::ChatCompletions,
            None => Endpoint::Completions,
        }
    }
}

/// A client's request as admitted, on its way to routing.
struct Outgoing<'a> {
    method: &'a Method,
    path_and_query: &'a str,
    headers: &'a HeaderMap,
    /// Flow control's leave to route it, held until it is counted in flight.
    flow: Option<crate::flow::Ticket>,
}

impl Proxy {
    /// Routes and forwards one request; `body` is forwarded unchanged.
    pub async fn handle(
        self: &Arc<Self>,
        endpoint: Endpoint,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response, ProxyError> {
        let span = telemetry::route_span(headers);
        async move {
            let started = Instant::now();
            let cache = self.cache.as_ref().filter(|_| endpoint != Endpoint::Other);
            let key_of = cache.map(|_| KeyOf::new(path_and_query, headers));
            let (mut parsed, key) = self.read(Some(endpoint), body, key_of).await?;
            let miss = match (cache, key) {
                (Some(cache), Some(Ok(key))) => match cache.lookup(key).await {
                    Lookup::Hit(resp) => return Ok(resp),
                    Lookup::Miss(miss) => Some((cache, miss)),
                    Lookup::Bypass => None,
                },
                (Some(cache), Some(Err(why))) => {
                    cache.skipped(why);
                    None
                }
                _ => None,
            };
            let admitted = admit(&self.admission, headers, &parsed).await?;
            with_priority(&self.admission, endpoint, &admitted, &mut parsed.request);
            let flow = flow_admit(self.flow.as_ref(), &parsed.model, &admitted.class).await?;
            let out = Outgoing {
                method,
                path_and_query,
                headers,
                flow,
            };
            let resp = self
                .forward_parsed(endpoint, out, parsed, miss, started)
                .await?;
            Ok(admitted.attach(resp))
        }
        .instrument(span)
        .await
    }

    /// Reads `body` on the pool into its [`Request`], its routed model and
    /// its prompt's chain, and with `key_of` the response cache's key of the
    /// request (or why it has none), in the same trip: the body is parsed
    /// once, and every step after takes the [`Request`]. `endpoint` `None`:
    /// a completions or chat request, told apart by `messages` (explain).
    /// The key names the routed model (an adapter's base), so that adapters
    /// share their base model's budget. The pool's thread works within the
    /// caller's span (its `tokenize` and `hash` spans nest there).
    pub(super) async fn read(
        &self,
        endpoint: Option<Endpoint>,
        body: Bytes,
        key_of: Option<KeyOf>,
    ) -> Result<(Parsed, Option<Result<RequestKey, Ineligible>>), ProxyError> {
        if body.is_empty() {
            return Err(ProxyError::InvalidRequest("\"model\" is required".into()));
        }
        let prompts = self.prompts.clone();
        let span = tracing::Span::current();
        let migrating = self.migration.limit > 0;
        self.pool
            .run(body.len(), move || {
                let request =
                    Request::parse(body).map_err(|e| ProxyError::InvalidRequest(e.to_string()))?;
                let endpoint = endpoint.unwrap_or_else(|| Endpoint::of_body(&request));
                let key = key_of.map(|of| {
                    request_key(&of.path, of.auth.as_deref(), &request).map(|mut k| {
                        k.model = prompts.pipelines().resolve(&k.model).route_model.to_owned();
                        k
                    })
                });
                let parsed = span.in_scope(|| {
                    let mut parsed = prompts.parse(endpoint, request)?;
                    if migrating {
                        parsed.migration = Some(migrate::eligibility(endpoint, &parsed.request));
                    }
                    Ok::<_, ProxyError>(parsed)
                })?;
                Ok((parsed, key))
            })
            .await?
    }

    /// Routes and forwards an admitted request.
    async fn forward_parsed(
        self: &Arc<Self>,
        endpoint: Endpoint,
        out: Outgoing<'_>,
        parsed: Parsed,
        miss: Option<(&ResponseCache, Miss)>,
        started: Instant,
    ) -> Result<Response, ProxyError> {
        let Outgoing {
            method,
            path_and_query,
            headers,
            flow,
        } = out;
        let Parsed {
            request,
            model,
            chain,
            migration,
        } = parsed;
        let streamed = request.fields().streamed();
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
        let decide = &self.decide;
        if endpoint != Endpoint::Other && pd::may_serve(decide, &model) {
            let out = pd::Outgoing {
                method,
                path_and_query,
                headers: &headers,
                request: &request,
                strip: asked_orca.then_some(ORCA_RESPONSE_HEADER),
            };
            let serving = pd::Serving {
                decide,
                upstream: &self.upstream,
            };
            if let Some(resp) = serving.serve(&model, &chain, &out, started).await? {
                return Ok(match miss {
                    Some((cache, miss)) => cache.record(miss, resp),
                    None => resp,
                });
            }
        }
        let valkey = Instant::now();
        let (ranked, tracked) = decide
            .rank(&model, &chain, None)
            .instrument(tracing::info_span!(target: SPANS, "valkey"))
            .await?;
        phase("valkey", valkey);
        // Routed (counted in flight): a dispatched request's place goes back.
        drop(flow);
        metrics::counter!("prefix_router_decisions_total", "outcome" => decision(&ranked, tracked))
            .increment(1);
        let client = migrate::Client {
            method,
            path_and_query,
            headers: &headers,
            chain: &chain,
        };
        let body = request.body();
        let (mut migration, body) = migrate::prepare(&self.migration, migration, &client, body);
        let mut last_error = String::from("no live worker");
        for target in ranked.iter().take(decide.max_attempts) {
            let worker = &target.candidate.worker_id;
            let counted = decide.count(&model, target, &chain, tracked).await;
            let guard: InFlightGuard = decide.guard(&model, worker, counted);
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
                    orca::record_load(&decide.store, &model, worker, &resp);
                    let strip = asked_orca.then_some(ORCA_RESPONSE_HEADER);
                    let resp = self
                        .relay(&mut migration, resp, worker, &target.url, guard, strip)
                        .await;
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
}

/// What the response cache's key needs of a request besides its body.
pub(super) struct KeyOf {
    /// The path with its query.
    path: String,
    /// The `Authorization` header (the tenant).
    auth: Option<Vec<u8>>,
}

impl KeyOf {
    fn new(path_and_query: &str, headers: &HeaderMap) -> Self {
        KeyOf {
            path: path_and_query.to_owned(),
            auth: headers
                .get(axum::http::header::AUTHORIZATION)
                .map(|v| v.as_bytes().to_vec()),
        }
    }
}
