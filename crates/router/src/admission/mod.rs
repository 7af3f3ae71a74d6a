//! Admission: who a request is for ([`RequestClass`]: its tenant and
//! priority) and whether its tenant's fleet-wide limits let it in, decided
//! once per request after its body is parsed and before it is routed, the
//! same way by `serve` and the endpoint picker.
//!
//! Layout (each uses only those above it):
//!
//! * `class`: [`classify`]: the tenant (API key hash, a header, or the
//!   body's `user`, as configured) and the objective's priority.
//! * `usage`: the engine's token counts, read from a response's end.
//! * `rate`: OpenAI's `x-ratelimit-*` headers and the 429 of a refusal.
//! * `local`: the degraded mode's per-router buckets.
//! * `ledger`: this router's requests in flight per tenant, and its lease
//!   on them in Valkey (`limit_lease.lua`).
//! * `limiter`: the limits in Valkey (`limit_*.lua`, one call per
//!   admission) and the degraded share, counting in the ledger.
//! * `ticket`: an admitted request's hold until its answer ends.
//! * this file: [`Admission`], what the request path calls.
//!
//! Below: `config` ([`AdmissionConfig`]), `state` (the scripts).

mod class;
mod ledger;
mod limiter;
mod local;
mod rate;
mod ticket;
mod usage;

pub use class::{RequestClass, Tenant, classify};
pub use rate::{RateState, Refusal};
pub use ticket::{Ticket, settle_with_body};
pub use usage::UsageTail;

use std::sync::Arc;

use axum::http::HeaderMap;
use serde_json::{Value, json};
use state::StateStore;

use crate::config::AdmissionConfig;
use limiter::Limiter;

/// What a request costs its tenant's tokens limit: its prompt's tokens and
/// the most the answer may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost {
    /// The prompt's tokens (counted by the tokenizer, else estimated).
    pub prompt_tokens: u64,
    /// The body's `max_tokens`, if it names one.
    pub max_tokens: Option<u64>,
}

/// An admitted request: its class, its tenant's limits after it, and its
/// hold on them (settled when the answer ends).
pub struct Admitted {
    /// Tenant and priority.
    pub class: RequestClass,
    /// The tenant's rate limits, for the answer's headers.
    pub rate: RateState,
    /// The hold on the limits.
    pub ticket: Ticket,
}

impl Admitted {
    /// `resp` with the tenant's rate limit headers, its body followed to
    /// its end to settle the ticket.
    pub fn attach(self, mut resp: axum::response::Response) -> axum::response::Response {
        resp.headers_mut().extend(self.rate.headers());
        settle_with_body(resp, self.ticket)
    }
}

/// The admission step, shared by every request of a router.
pub struct Admission {
    cfg: Arc<AdmissionConfig>,
    limiter: Arc<Limiter>,
}

impl Admission {
    /// Admission by `cfg`, its limits kept in `store`.
    pub fn new(cfg: AdmissionConfig, store: StateStore) -> Self {
        let limiter = Arc::new(Limiter::new(store, cfg.window));
        Admission {
            cfg: Arc::new(cfg),
            limiter,
        }
    }

    /// The settings.
    pub fn config(&self) -> &AdmissionConfig {
        &self.cfg
    }

    /// The class of a request with `headers` and body `user`.
    pub fn classify(&self, headers: &HeaderMap, user: Option<&str>) -> RequestClass {
        classify(&self.cfg, headers, user)
    }

    /// Tokens reserved for a request of `cost`.
    fn reserve(&self, cost: Cost) -> u64 {
        cost.prompt_tokens
            .saturating_add(cost.max_tokens.unwrap_or(self.cfg.default_max_tokens))
    }

    /// Classifies a request and admits it against its tenant's limits: at
    /// most one Valkey call, none when no limit applies to the tenant.
    pub async fn admit(
        &self,
        headers: &HeaderMap,
        user: Option<&str>,
        cost: Cost,
    ) -> Result<Admitted, Refusal> {
        let class = self.classify(headers, user);
        let limits = self
            .cfg
            .limits_of(&class.tenant.id, class.tenant.configured);
        let label = class.tenant.label().to_owned();
        if !limits.any() {
            count(&class.tenant, "admitted", "none");
            return Ok(Admitted {
                class,
                rate: RateState::default(),
                ticket: Ticket::none(),
            });
        }
        let reserved = self.reserve(cost);
        match self
            .limiter
            .admit(&class.tenant.id, &limits, reserved)
            .await
        {
            Ok((rate, counted)) => {
                count(&class.tenant, "admitted", "none");
                let tokens = limits.tokens_per_minute.map(|l| self.limiter.gcra(l, true));
                let ticket = Ticket::new(
                    self.limiter.clone(),
                    class.tenant.id.clone(),
                    label,
                    tokens,
                    reserved,
                    counted,
                );
                Ok(Admitted {
                    class,
                    rate,
                    ticket,
                })
            }
            Err(refusal) => {
                count(&class.tenant, "limited", refusal.reason.as_str());
                tracing::debug!(tenant = %class.tenant.id, reason = refusal.reason.as_str(), "request limited");
                Err(refusal)
            }
        }
    }

    /// The admission decision for a request, without changing anything:
    /// its class, its tenant's limits and where they stand (explain).
    pub async fn explain(&self, headers: &HeaderMap, user: Option<&str>, cost: Cost) -> Value {
        let class = self.classify(headers, user);
        let limits = self
            .cfg
            .limits_of(&class.tenant.id, class.tenant.configured);
        let reserved = self.reserve(cost);
        let mut out = json!({
            "tenant": class.tenant.id,
            "tenant_label": class.tenant.label(),
            "configured": class.tenant.configured,
            "weight": class.tenant.weight,
            "priority": class.priority,
            "sheddable": class.sheddable(),
            "objective": class.objective,
            "limits": {
                "requests_per_minute": limits.requests_per_minute,
                "tokens_per_minute": limits.tokens_per_minute,
                "max_concurrent": limits.max_concurrent,
                "window_seconds": self.cfg.window.as_secs_f64(),
            },
            "tokens_reserved": reserved,
        });
        if !limits.any() {
            out["decision"] = json!("admitted: no limit applies to this tenant");
            return out;
        }
        match self.limiter.peek(&class.tenant.id, &limits, reserved).await {
            Ok((refused, rate, in_flight)) => {
                out["decision"] = json!(match refused {
                    None => "admitted".to_owned(),
                    Some(r) => format!("limited: {}", r.as_str()),
                });
                out["in_flight"] = json!(in_flight);
                out["headers"] = rate
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or_default())))
                    .collect::<serde_json::Map<_, _>>()
                    .into();
            }
            Err(e) => {
                out["decision"] = json!(format!(
                    "unknown: Valkey did not answer ({e}); requests would be held to this router's share"
                ));
            }
        }
        out
    }

    /// The live routers last seen: the degraded mode gives each router
    /// this share of every limit.
    pub fn set_live_routers(&self, n: u64) {
        self.limiter.set_live_routers(n);
    }

    /// Renews this router's leases on its tenants' requests in flight,
    /// until `stop`.
    pub async fn lease_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        if !self.cfg.limits_anything() {
            return;
        }
        let period = self.limiter.ledger().renew_period();
        loop {
            self.limiter.ledger().renew().await;
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.changed() => {
                    if *stop.borrow() {
                        return;
                    }
                }
            }
        }
    }
}

/// Counts an admission decision, overall by reason and per tenant label.
fn count(tenant: &Tenant, outcome: &'static str, reason: &'static str) {
    metrics::counter!("prefix_router_admission_total", "outcome" => outcome, "reason" => reason)
        .increment(1);
    metrics::counter!("prefix_router_tenant_requests_total", "tenant" => tenant.label().to_owned(), "outcome" => outcome)
        .increment(1);
}
