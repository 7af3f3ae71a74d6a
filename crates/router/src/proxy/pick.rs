//! [`Proxy::pick`]: the routing decision without the forwarding, for a
//! gateway that sends the request itself (the endpoint picker); for a
//! disaggregated model, the decode worker and the prefill worker
//! (`pd::pick`).

use std::time::Instant;

use axum::http::HeaderMap;
use bytes::Bytes;
use tracing::Instrument;

use super::decision::{Chain, Target, UrlFilter, decision, record_outcome};
use super::pd::{self, PdPick, PrefillLeg};
use super::pipeline::{Endpoint, Parsed, admit, flow_admit, with_priority};
use super::{InFlightGuard, Proxy, ProxyError};
use crate::admission::Ticket;
use crate::telemetry::{self, SPANS};

/// Where a request should go: the workers in order, the first claimed and
/// counted in flight (as [`Proxy::handle`] does before forwarding) until
/// this is dropped or the request is [`served`](Proxy::served) elsewhere.
pub struct Pick {
    model: String,
    chain: Chain,
    ranked: Vec<Target>,
    /// Whether the ranking came from the shared state (else the fallback:
    /// nothing claimed or counted).
    tracked: bool,
    /// Which of `ranked` the count is on.
    counted_on: usize,
    guard: InFlightGuard,
    /// For a disaggregated model: the prefill half (`ranked` are then
    /// decode workers).
    pd: Option<PrefillLeg>,
    /// The body the worker must get instead of the client's, when the
    /// client's carried fields only the router sets (`crate::request`), or
    /// the router sets the request's priority (`--pass-priority`).
    changed_body: Option<Bytes>,
    /// The request's hold on its tenant's limits.
    ticket: Ticket,
}

impl Pick {
    /// The routed model.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The chosen workers' base URLs, best first (the rest are fallbacks).
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.ranked.iter().map(|t| t.url.as_str())
    }

    /// The id of the worker at `index` of [`urls`](Self::urls).
    pub fn worker_id(&self, index: usize) -> Option<&str> {
        self.ranked
            .get(index)
            .map(|t| t.candidate.worker_id.as_str())
    }

    /// Tokens of the prompt, as the engine counts them.
    pub fn prompt_tokens(&self) -> u64 {
        self.chain.prompt_tokens
    }

    /// Whether the decision came from the shared state (else from the
    /// fallback, with Valkey away).
    pub fn tracked(&self) -> bool {
        self.tracked
    }

    /// The prefill worker's base URL, when the request is disaggregated
    /// and not skipped: the decode worker's sidecar sends it the prefill.
    pub fn prefill_url(&self) -> Option<&str> {
        let target = self.pd.as_ref()?.target.as_ref()?;
        Some(target.url.as_str())
    }

    /// The body to send in place of the client's, when the client's
    /// carried fields only the router sets or the router sets the
    /// request's priority; `None`: the client's as sent.
    pub fn changed_body(&self) -> Option<&Bytes> {
        self.changed_body.as_ref()
    }

    /// The answer ended having used `used` tokens, when known: the
    /// tenant's limits are settled (see [`Ticket::settle`]).
    pub fn settle(self, used: Option<u64>) {
        let Pick { ticket, .. } = self;
        ticket.settle(used);
    }

    /// The response's first bytes came: the worker's prefill of it is
    /// over, and so is a prefill worker's part.
    pub fn first_byte(&mut self) {
        self.guard.first_byte();
        if let Some(leg) = self.pd.as_mut() {
            leg.guard = None;
        }
    }
}

impl Proxy {
    /// Reads `body` for `endpoint`, ranks the workers (only those whose URL
    /// `allowed` accepts, when given), claims the prompt's blocks for the
    /// first and counts it in flight; at most `--max-attempts` workers.
    /// `headers` carry the client's trace context.
    pub async fn pick(
        &self,
        endpoint: Endpoint,
        headers: &HeaderMap,
        body: &Bytes,
        allowed: Option<&UrlFilter<'_>>,
    ) -> Result<Pick, ProxyError> {
        let span = telemetry::route_span(headers);
        async move {
        let started = Instant::now();
        let (mut parsed, _) = self.read(Some(endpoint), body.clone(), None).await?;
        let admitted = admit(&self.admission, headers, &parsed).await?;
        // The gateway sends on the body the picker hands back: with the
        // request's priority, when configured, as `serve` forwards it.
        with_priority(&self.admission, endpoint, &admitted, &mut parsed.request);
        // The exchange is held (Envoy waits) while the request waits here.
        let flow = flow_admit(self.flow.as_ref(), &parsed.model, &admitted.class).await?;
        let Parsed {
            request,
            model,
            chain,
            ..
        } = parsed;
        let changed_body = request.changed_body();
        let span = tracing::Span::current();
        span.record("model", model.as_str());
        let decide = &self.decide;
        if endpoint != Endpoint::Other
            && pd::may_serve(decide, &model)
            && let Some(PdPick { ranked, guard, leg }) =
                pd::pick(decide, &model, &chain, allowed).await
        {
            if let Some(first) = ranked.first() {
                span.record("worker", first.candidate.worker_id.as_str());
                record_outcome(&model, first, &chain);
            }
            metrics::histogram!("prefix_router_route_seconds")
                .record(started.elapsed().as_secs_f64());
            return Ok(Pick {
                model,
                chain,
                ranked,
                tracked: true,
                counted_on: 0,
                guard,
                pd: Some(leg),
                changed_body,
                ticket: admitted.ticket,
            });
        }
        let (mut ranked, tracked) = decide
            .rank(&model, &chain, allowed)
            .instrument(tracing::info_span!(target: SPANS, "valkey"))
            .await?;
        drop(flow);
        metrics::counter!("prefix_router_decisions_total", "outcome" => decision(&ranked, tracked))
            .increment(1);
        ranked.truncate(decide.max_attempts);
        let Some(first) = ranked.first() else {
            return Err(ProxyError::UnknownModel(model));
        };
        let counted = decide.count(&model, first, &chain, tracked).await;
        let guard = decide.guard(&model, &first.candidate.worker_id, counted);
        span.record("worker", first.candidate.worker_id.as_str());
        record_outcome(&model, first, &chain);
        metrics::histogram!("prefix_router_route_seconds").record(started.elapsed().as_secs_f64());
        Ok(Pick {
            model,
            chain,
            ranked,
            tracked,
            counted_on: 0,
            guard,
            pd: None,
            changed_body,
            ticket: admitted.ticket,
        })
        }
        .instrument(span)
        .await
    }

    /// The gateway says the worker at `index` of the pick's URLs served the
    /// request (the first failed): the count moves there, and that worker
    /// is claimed the prompt's blocks as the first was.
    pub async fn served(&self, pick: &mut Pick, index: usize) {
        if index == pick.counted_on {
            return;
        }
        let Some(target) = pick.ranked.get(index) else {
            return;
        };
        let decide = &self.decide;
        let counted = match (&pick.pd, pick.tracked) {
            (_, false) => None,
            (None, true) => {
                let tokens = pick.chain.uncached(target);
                decide
                    .assign(&pick.model, target, &pick.chain, tokens)
                    .await
            }
            // A decode worker computes the prompt only without a prefill.
            (Some(leg), true) => {
                let tokens = match leg.target {
                    Some(_) => 0,
                    None => pick.chain.uncached(target),
                };
                decide
                    .assign(&pick.model, target, &pick.chain, tokens)
                    .await
            }
        };
        pick.guard = decide.guard(&pick.model, &target.candidate.worker_id, counted);
        pick.counted_on = index;
    }
}
