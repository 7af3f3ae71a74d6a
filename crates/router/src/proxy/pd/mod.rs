//! Serving a request disaggregated (issue 14), as vLLM's own disaggregated
//! proxies do, with both picks made through the shared view.
//!
//! 1. One read-only lookup of the model's live workers gives the decode
//!    worker ([`PdPlan`]: free KV, batch occupancy, its own match) and
//!    whether it holds enough of the prompt to skip the prefill worker. The
//!    decode worker's blocks are claimed (it will receive them) and it is
//!    counted in flight until the answer ends.
//! 2. Unless skipped, the prefill worker is chosen by the atomic
//!    cache-aware step restricted to the prefill workers (matched prefix
//!    against queued prefill), which claims its blocks (it computes them)
//!    and counts it until its answer. It gets the request with `max_tokens`
//!    1, unstreamed, asking for a remote decode (`pd_bodies`).
//! 3. The decode worker gets the client's request with the prefill answer's
//!    `kv_transfer_params`, and its answer is streamed to the client.
//!
//! A prefill worker that fails (unreachable, an error, an answer without
//! usable params) is replaced by the next one; when none succeeds, or one
//! refuses the request itself (a 4xx), the decode worker computes the
//! prompt alone. Nothing reaches the client before the decode worker
//! answers, so a client never sees half an answer from two workers.
//!
//! The endpoint picker makes the same two picks without forwarding
//! (`pick`); the steps both share are in `steps`, the plan in `plan`, the
//! prefill and decode bodies in `bodies`.

mod bodies;
mod pick;
mod plan;
mod steps;

pub use pick::{PdPick, PrefillLeg, pick};
pub use plan::{PdPlan, disaggregated};
pub use steps::prefill_policy;

use std::time::Instant;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;
use tracing::Instrument;

use super::decision::{Chain, Decider, Target, record_outcome};
use super::{InFlightGuard, ProxyError, Upstream, forward, orca};
use crate::request::Request;
use crate::telemetry::{self, SPANS};
use bodies::answer_params;
use protocol::headers::{ORCA_REQUEST_HEADER, PREFILL_WORKER_HEADER};
use steps::{Planned, count_path};

/// Largest prefill answer read: one token and the handshake, a few KiB.
const MAX_PREFILL_ANSWER: usize = 1 << 20;

/// A client's request as the proxy forwards it.
pub struct Outgoing<'a> {
    pub method: &'a Method,
    pub path_and_query: &'a str,
    pub headers: &'a HeaderMap,
    /// The request, read once: both workers' bodies are written from it.
    pub request: &'a Request,
    /// A response header the router asked for itself (dropped from the
    /// client's answer), when it did.
    pub strip: Option<&'static str>,
}

/// Why a prefill worker gave no params.
enum PrefillFailure {
    /// It refused the request itself (a 4xx): another prefill worker would
    /// too; the decode worker answers it (with its own error if it is one).
    Refused(String),
    /// It failed: the next prefill worker may not.
    Failed(String),
}

/// Whether `model` may be served disaggregated: the workers last seen
/// include prefill and decode ones, or none were seen yet (the lookup of
/// [`Serving::serve`] tells).
pub fn may_serve(decide: &Decider, model: &str) -> bool {
    decide.known.roles(model).is_none_or(disaggregated)
}

/// What serving a request disaggregated uses: the decision and the HTTP
/// client.
pub struct Serving<'a> {
    pub decide: &'a Decider,
    pub upstream: &'a Upstream,
}

impl Serving<'_> {
    /// Serves the request disaggregated if its model is; `None`: it is not
    /// (or Valkey is away), route it as usual.
    pub async fn serve(
        &self,
        model: &str,
        chain: &Chain,
        out: &Outgoing<'_>,
        started: Instant,
    ) -> Result<Option<Response>, ProxyError> {
        let decide = self.decide;
        let Some(planned) = steps::plan(decide, model, chain, |_| true).await else {
            return Ok(None);
        };
        let plan = &planned.plan;
        let Some(decode) = plan.decode.first() else {
            return Ok(None);
        };
        let mut decode_guard = steps::reserve_decode(decide, model, chain, plan, decode).await;
        tracing::debug!(model, decode = %decode.candidate.worker_id, why = %plan.why, "disaggregated route");
        let prefilled = if plan.skip {
            None
        } else {
            self.prefill(model, chain, &planned, out).await
        };
        if prefilled.is_none() && !plan.skip {
            // No prefill worker did it: the decode worker computes the
            // prompt, and its queue holds those tokens until its first byte.
            decode_guard.add_prefill(chain.uncached(decode));
        }
        count_path(prefilled.is_some(), plan.skip);
        metrics::histogram!("prefix_router_route_seconds").record(started.elapsed().as_secs_f64());
        let params = prefilled.as_ref().map(|(p, _)| p.clone());
        let body = bodies::decode(out.request, params.as_ref());
        let mut resp = self
            .decode(
                model,
                chain,
                plan,
                decode_guard,
                body,
                out,
                prefilled.is_some(),
            )
            .await?;
        if let Some(v) = prefilled.and_then(|(_, id)| HeaderValue::from_str(&id).ok()) {
            resp.headers_mut().insert(PREFILL_WORKER_HEADER, v);
        }
        Ok(Some(resp))
    }

    /// Runs the prefill on the best prefill worker that succeeds: the
    /// params its answer gives the decode worker, and its id; `None` when
    /// none did (the decode worker then computes the prompt).
    async fn prefill(
        &self,
        model: &str,
        chain: &Chain,
        planned: &Planned,
        out: &Outgoing<'_>,
    ) -> Option<(Value, String)> {
        let decide = self.decide;
        let ranked = steps::rank_prefill(decide, model, chain, planned).await?;
        let body = bodies::prefill(out.request);
        let mut headers = out.headers.clone();
        if !headers.contains_key(ORCA_REQUEST_HEADER) {
            headers.insert(ORCA_REQUEST_HEADER, HeaderValue::from_static("TEXT"));
        }
        for target in ranked.iter().take(decide.max_attempts) {
            let worker = &target.candidate.worker_id;
            let counted = decide.count(model, target, chain, true).await;
            // Counted until its answer is read (or it failed): its part ends there.
            let _guard = decide.guard(model, worker, counted);
            let span = tracing::info_span!(target: SPANS, "prefill", otel.kind = "client", worker = %worker);
            telemetry::hand_on(&span, &mut headers);
            match self
                .prefill_once(model, target, out, &headers, body.clone())
                .instrument(span)
                .await
            {
                Ok(params) => return Some((params, worker.clone())),
                Err(PrefillFailure::Refused(why)) => {
                    tracing::warn!(
                        worker,
                        why,
                        "prefill worker refused the request; the decode worker answers it"
                    );
                    return None;
                }
                Err(PrefillFailure::Failed(why)) => {
                    tracing::warn!(worker, why, "prefill worker failed; trying the next");
                    metrics::counter!("prefix_router_upstream_retries_total").increment(1);
                }
            }
        }
        tracing::warn!(
            model,
            "no prefill worker succeeded; the decode worker prefills"
        );
        None
    }

    /// One prefill attempt: the params of its answer.
    async fn prefill_once(
        &self,
        model: &str,
        target: &Target,
        out: &Outgoing<'_>,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Value, PrefillFailure> {
        let resp = self
            .upstream
            .send(out.method, &target.url, out.path_and_query, headers, body)
            .await
            .map_err(|e| PrefillFailure::Failed(e.to_string()))?;
        orca::record_load(
            &self.decide.store,
            model,
            &target.candidate.worker_id,
            &resp,
        );
        let status = resp.status();
        let answer = read_capped(resp).await.map_err(PrefillFailure::Failed)?;
        let refused = status.is_client_error()
            && status != StatusCode::REQUEST_TIMEOUT
            && status != StatusCode::TOO_MANY_REQUESTS;
        if refused {
            let text = String::from_utf8_lossy(&answer[..answer.len().min(300)]).into_owned();
            return Err(PrefillFailure::Refused(format!("{status}: {text}")));
        }
        if !status.is_success() {
            return Err(PrefillFailure::Failed(format!("answered {status}")));
        }
        answer_params(&answer).map_err(PrefillFailure::Failed)
    }

    /// Sends `body` to the plan's decode worker, the next ones if it cannot
    /// be reached; its answer, relayed. `first` is the count of the first.
    #[allow(clippy::too_many_arguments)]
    async fn decode(
        &self,
        model: &str,
        chain: &Chain,
        plan: &PdPlan,
        first: InFlightGuard,
        body: Bytes,
        out: &Outgoing<'_>,
        prefilled: bool,
    ) -> Result<Response, ProxyError> {
        let decide = self.decide;
        let mut first = Some(first);
        let mut headers = out.headers.clone();
        let mut last_error = String::from("no decode worker");
        for target in plan.decode.iter().take(decide.max_attempts) {
            let worker = &target.candidate.worker_id;
            let guard = match first.take() {
                Some(g) => g,
                None => {
                    let tokens = if prefilled { 0 } else { chain.uncached(target) };
                    let counted = decide.assign(model, target, chain, tokens).await;
                    decide.guard(model, worker, counted)
                }
            };
            let span = tracing::info_span!(target: SPANS, "upstream", otel.kind = "client", worker = %worker);
            telemetry::hand_on(&span, &mut headers);
            match self
                .upstream
                .send(
                    out.method,
                    &target.url,
                    out.path_and_query,
                    &headers,
                    body.clone(),
                )
                .instrument(span)
                .await
            {
                Ok(resp) => {
                    tracing::Span::current().record("worker", worker.as_str());
                    record_outcome(model, target, chain);
                    orca::record_load(&decide.store, model, worker, &resp);
                    return Ok(forward::relay(resp, worker, guard, out.strip));
                }
                Err(e) => {
                    tracing::warn!(worker, error = %e, "decode worker failed before answering; trying the next");
                    metrics::counter!("prefix_router_upstream_retries_total").increment(1);
                    last_error = format!("{worker}: {e}");
                }
            }
        }
        Err(ProxyError::NoWorker(last_error))
    }
}

/// A prefill answer's body, at most [`MAX_PREFILL_ANSWER`] bytes.
async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut answer = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        answer.extend_from_slice(&chunk);
        if answer.len() > MAX_PREFILL_ANSWER {
            return Err(format!("answer over {MAX_PREFILL_ANSWER} bytes"));
        }
    }
    Ok(answer)
}
