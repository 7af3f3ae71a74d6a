//! [`Exchange`]: one HTTP request's ext_proc stream, message by message:
//! gather the body, pick, answer in the order Envoy's body mode requires,
//! follow the response to its end and release the in-flight count.

use std::collections::HashSet;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;

use super::EppContext;
use super::body_mode::Mode;
use super::messages::{Phase, body_pieces, destination, immediate, proceed, set_body};
use super::metadata::{client_headers, endpoint_of, header, served, subset_hint};
use super::wire::processing_request::Request;
use super::wire::{HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse};
use crate::admission::UsageTail;
use crate::error::ApiError;
use crate::proxy::{Endpoint, Pick, ProxyError};

/// What to send back for one message from Envoy.
pub enum Step {
    /// These answers (possibly none), and go on.
    Send(Vec<ProcessingResponse>),
    /// This answer, then end the stream (an immediate response).
    Stop(Box<ProcessingResponse>),
}

/// One request's stream.
pub struct Exchange {
    ctx: Arc<EppContext>,
    request_mode: Mode,
    response_mode: Mode,
    /// Envoy named the modes (first message of the stream).
    modes_known: bool,
    endpoint: Endpoint,
    subset: Option<HashSet<String>>,
    body: Vec<u8>,
    pick: Option<Pick>,
    /// The pick's workers as endpoints, aligned with its URLs.
    endpoints: Vec<String>,
    usage: UsageTail,
    response_ok: bool,
    /// The response's status was seen, and is an error (it used no tokens).
    response_failed: bool,
    /// The client's request headers (its trace context, and what admission
    /// classifies it by).
    headers: HeaderMap,
}

impl Exchange {
    pub fn new(ctx: Arc<EppContext>) -> Self {
        let mode = Mode::from(ctx.body_mode);
        Exchange {
            ctx,
            request_mode: mode,
            response_mode: mode,
            modes_known: false,
            endpoint: Endpoint::Other,
            subset: None,
            body: Vec::new(),
            pick: None,
            endpoints: Vec::new(),
            usage: UsageTail::default(),
            response_ok: false,
            response_failed: false,
            headers: HeaderMap::new(),
        }
    }

    /// Handles one message from Envoy.
    pub async fn on(&mut self, req: ProcessingRequest) -> Step {
        if let (false, Some(config)) = (self.modes_known, &req.protocol_config) {
            self.request_mode = Mode::from_envoy(config.request_body_mode);
            self.response_mode = Mode::from_envoy(config.response_body_mode);
            self.modes_known = true;
        }
        if self.subset.is_none() {
            self.subset = subset_hint(req.metadata_context.as_ref());
        }
        // The endpoint that served comes with the response's first message
        // the picker sees (headers, or the body when headers are skipped).
        if matches!(
            req.request,
            Some(
                Request::ResponseHeaders(_)
                    | Request::ResponseBody(_)
                    | Request::ResponseTrailers(_)
            )
        ) && let Some(served) = served(req.metadata_context.as_ref())
        {
            self.served(&served).await;
        }
        match req.request {
            Some(Request::RequestHeaders(h)) => self.on_request_headers(h).await,
            Some(Request::RequestBody(b)) => self.on_request_body(b).await,
            Some(Request::RequestTrailers(_)) => self.on_request_trailers().await,
            Some(Request::ResponseHeaders(h)) => {
                let status = header(h.headers.as_ref(), ":status");
                self.response_ok = status.as_deref() == Some("200");
                self.response_failed = status.is_some_and(|s| !s.starts_with('2'));
                if h.end_of_stream {
                    self.finish();
                }
                answer(proceed(Phase::ResponseHeaders))
            }
            Some(Request::ResponseBody(b)) => self.on_response_body(b),
            Some(Request::ResponseTrailers(_)) => {
                self.finish();
                answer(proceed(Phase::ResponseTrailers))
            }
            None => Step::Send(Vec::new()),
        }
    }

    async fn on_request_headers(&mut self, h: HttpHeaders) -> Step {
        // The client's headers (Envoy's pseudo-headers aside): its trace
        // context for the routing span, its key, tenant and objective for
        // admission.
        self.headers = client_headers(h.headers.as_ref());
        let path = header(h.headers.as_ref(), ":path").unwrap_or_default();
        self.endpoint = match path.split('?').next().unwrap_or_default() {
            "/v1/completions" => Endpoint::Completions,
            "/v1/chat/completions" => Endpoint::ChatCompletions,
            _ => Endpoint::Other,
        };
        if h.end_of_stream || self.request_mode == Mode::Skipped {
            // Nothing to read: by load, among the default model's workers.
            let Some(model) = self.ctx.default_model.clone() else {
                return reject(ApiError::bad_request(
                    "the endpoint picker routes by the request body's model and prompt; this request has no body and the picker has no --model",
                ));
            };
            let body = serde_json::json!({ "model": model }).to_string();
            self.endpoint = Endpoint::Other;
            return match self.decide(Phase::RequestHeaders, body.into()).await {
                Ok(answers) => Step::Send(answers),
                Err(e) => reject(e),
            };
        }
        match self.request_mode {
            // The destination waits for the body.
            Mode::FullDuplex => Step::Send(Vec::new()),
            Mode::Buffered | Mode::BufferedPartial => answer(proceed(Phase::RequestHeaders)),
            Mode::Streamed | Mode::Skipped => reject(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "epp_misconfigured",
                "the endpoint picker needs the request body: set the ext_proc filter's request_body_mode to FULL_DUPLEX_STREAMED or BUFFERED",
            )),
        }
    }

    async fn on_request_body(&mut self, b: HttpBody) -> Step {
        // The destination went out with the whole body: a body after it
        // (a gateway's protocol error) cannot change it, and is ignored
        // rather than refused after the fact.
        if self.picked() {
            tracing::debug!(
                bytes = b.body.len(),
                "ext_proc request body after the pick, ignored"
            );
            return Step::Send(Vec::new());
        }
        if self.body.len() + b.body.len() > self.ctx.max_body_bytes {
            return reject(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                format!(
                    "the request body is larger than {} bytes",
                    self.ctx.max_body_bytes
                ),
            ));
        }
        self.body.extend_from_slice(&b.body);
        match (self.request_mode, b.end_of_stream) {
            (_, true) => self.body_complete(true).await,
            // More chunks, or trailers that end the body, are coming.
            (Mode::FullDuplex, false) => Step::Send(Vec::new()),
            // Buffered is always the whole body (Envoy fails a larger one
            // itself); without the end mark, trailers follow.
            (Mode::Buffered, false) => self.body_complete(false).await,
            // Envoy's buffer filled before the body ended: the prompt
            // would be cut.
            _ => reject(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                "the request body is larger than the gateway's ext_proc buffer",
            )),
        }
    }

    /// Trailers: in full-duplex mode they end a body whose last chunk did
    /// not; the answers keep the order headers, body, trailers.
    async fn on_request_trailers(&mut self) -> Step {
        if self.request_mode != Mode::FullDuplex || self.picked() {
            return answer(proceed(Phase::RequestTrailers));
        }
        match self.body_complete(false).await {
            Step::Send(mut answers) => {
                answers.push(proceed(Phase::RequestTrailers));
                Step::Send(answers)
            }
            stop => stop,
        }
    }

    /// The whole body is in: pick, and answer as the mode requires (full
    /// duplex: the headers, then the body handed back, ended if `ended`).
    async fn body_complete(&mut self, ended: bool) -> Step {
        let body = Bytes::from(std::mem::take(&mut self.body));
        let phase = match self.request_mode {
            Mode::FullDuplex => Phase::RequestHeaders,
            _ => Phase::RequestBody,
        };
        match self.decide(phase, body.clone()).await {
            Ok(mut answers) => {
                if self.request_mode == Mode::FullDuplex {
                    // The body as the worker must get it (without fields
                    // only the router sets).
                    let body = self
                        .pick
                        .as_ref()
                        .and_then(|p| p.changed_body())
                        .unwrap_or(&body);
                    answers.extend(body_pieces(Phase::RequestBody, body, ended));
                }
                Step::Send(answers)
            }
            Err(e) => reject(e),
        }
    }

    /// Picks for `body` and answers `phase` with the destination.
    async fn decide(
        &mut self,
        phase: Phase,
        body: Bytes,
    ) -> Result<Vec<ProcessingResponse>, ApiError> {
        let proxy = &self.ctx.proxy;
        let pick = match &self.subset {
            Some(subset) => {
                let allowed = |url: &str| endpoint_of(url).is_some_and(|e| subset.contains(&e));
                proxy
                    .pick(self.endpoint, &self.headers, &body, Some(&allowed))
                    .await
            }
            None => proxy.pick(self.endpoint, &self.headers, &body, None).await,
        }
        .map_err(|e| self.rejection(e))?;
        self.endpoints = pick.urls().filter_map(endpoint_of).collect();
        if self.endpoints.len() != pick.urls().count() {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_ready_endpoint",
                "a chosen worker's URL has no host:port",
            ));
        }
        let prefill = match pick.prefill_url() {
            Some(url) => Some(endpoint_of(url).ok_or_else(|| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no_ready_endpoint",
                    "the chosen prefill worker's URL has no host:port",
                )
            })?),
            None => None,
        };
        tracing::debug!(
            worker = pick.worker_id(0),
            endpoints = %self.endpoints.join(","),
            prefill = prefill.as_deref().unwrap_or(""),
            prompt_tokens = pick.prompt_tokens(),
            tracked = pick.tracked(),
            "picked"
        );
        let cleaned = pick.changed_body();
        let mut answer = destination(
            phase,
            &self.endpoints,
            prefill.as_deref(),
            cleaned.map(Bytes::len),
        );
        if let (Some(cleaned), Phase::RequestBody) = (cleaned, phase) {
            // Buffered: the body goes on as the worker must get it.
            set_body(&mut answer, cleaned);
        }
        self.pick = Some(pick);
        metrics::counter!("prefix_router_epp_picks_total", "outcome" => "picked").increment(1);
        Ok(vec![answer])
    }

    /// An error as the protocol wants it: no endpoint → 503, shed → 429.
    fn rejection(&self, e: ProxyError) -> ApiError {
        match e {
            ProxyError::UnknownModel(model) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_ready_endpoint",
                match self.subset {
                    Some(_) => format!(
                        "no live worker of model {model:?} is in the gateway's endpoint subset"
                    ),
                    None => format!("model {model:?} is not served by any live worker"),
                },
            ),
            ProxyError::Busy(_) => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "tokenizer_busy",
                e.to_string(),
            ),
            other => ApiError::from(other),
        }
    }

    /// Envoy's retries reached `endpoint`: the count follows.
    async fn served(&mut self, endpoint: &str) {
        let Some(index) = self.endpoints.iter().position(|e| e == endpoint) else {
            return;
        };
        if let Some(pick) = self.pick.as_mut() {
            self.ctx.proxy.served(pick, index).await;
        }
    }

    fn on_response_body(&mut self, b: HttpBody) -> Step {
        if self.response_ok {
            self.usage.feed(&b.body);
        }
        if !b.body.is_empty()
            && let Some(pick) = self.pick.as_mut()
        {
            pick.first_byte();
        }
        let answers = match self.response_mode {
            Mode::FullDuplex => body_pieces(Phase::ResponseBody, &b.body, b.end_of_stream),
            _ => vec![proceed(Phase::ResponseBody)],
        };
        if b.end_of_stream {
            self.finish();
        }
        Step::Send(answers)
    }

    /// Whether the destination was given (the request is with a worker).
    pub fn picked(&self) -> bool {
        self.pick.is_some() || !self.endpoints.is_empty()
    }

    /// The answer to a gateway that did not send the whole request in time.
    pub fn timed_out(&self) -> Box<ProcessingResponse> {
        refuse(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request's headers and body did not arrive within --client-timeout",
        ))
    }

    /// The response ended: record the engine's usage, release the count.
    pub fn finish(&mut self) {
        let Some(pick) = self.pick.take() else {
            return;
        };
        let usage = self.usage.usage();
        if let Some(usage) = usage {
            let model = pick.model().to_owned();
            metrics::counter!("prefix_router_engine_prompt_tokens_total", "model" => model.clone())
                .increment(usage.prompt_tokens);
            metrics::counter!("prefix_router_engine_cached_tokens_total", "model" => model)
                .increment(usage.cached_tokens);
        }
        pick.settle(match usage {
            Some(u) => Some(u.prompt_tokens + u.completion_tokens),
            None if self.response_failed => Some(0),
            None => None,
        });
    }
}

fn answer(response: ProcessingResponse) -> Step {
    Step::Send(vec![response])
}

fn reject(error: ApiError) -> Step {
    Step::Stop(refuse(error))
}

/// An immediate response with `error`, counted and, for a 5xx, logged.
fn refuse(error: ApiError) -> Box<ProcessingResponse> {
    metrics::counter!("prefix_router_epp_picks_total", "outcome" => error.kind).increment(1);
    if error.status.is_server_error() {
        tracing::warn!(status = %error.status, error = %error.message, "endpoint picker refused a request");
    }
    Box::new(immediate(&error))
}
