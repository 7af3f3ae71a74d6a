//! Mid-stream migration (issue 29): an answer whose worker fails after its
//! first byte moves to another worker and goes on in the same client
//! stream, token for token; a non-streamed one is streamed from its
//! workers and answered whole.
//!
//! * `eligible`: which requests can be continued exactly, read once from
//!   the body; the router asks their workers for `return_token_ids`.
//! * `sse`: events out of a worker's bytes, and the events the relay writes.
//! * `ids`: the token-id fields of a chunk, found in its bytes, the chunk
//!   without them, and the few other fields the relay reads (`walk`: the
//!   walk over the bytes, checked as strictly as serde reads them).
//! * `chunk`: the few other fields of a chunk migration reads, without
//!   building it.
//! * `answer`: one answer across workers: the ids so far, the chunks as
//!   the client gets them, the next worker's request.
//! * `relay`: the stream itself: failure detection and failover.
//! * `assemble`: a non-streamed request, asked of its workers as a stream
//!   and answered as one JSON object once whole.
//! * `drains`: the drain deadlines this router knows ([`DrainWatch`]): an
//!   answer still running on a draining worker moves at its deadline.
//!
//! The next worker is chosen as any request's ([`Proxy::reroute`]):
//! cache-aware over the live workers but those that failed this answer,
//! its blocks claimed and the request counted in flight. It gets a
//! completion of the prompt's token ids (as the first worker reported
//! them; for chat, the rendered prompt) followed by the tokens generated,
//! with `max_tokens` reduced by them. See `docs/migration.md`.

mod answer;
mod assemble;
mod chunk;
mod drains;
mod eligible;
mod ids;
mod relay;
mod sse;
mod walk;

use std::sync::Arc;

use axum::response::Response;

use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use tracing::Instrument;

use super::decision::Chain;
use super::{InFlightGuard, Proxy, forward};
use crate::config::MigrationSettings;
use crate::telemetry::SPANS;

pub use drains::{DRAIN_REFRESH, DrainWatch};
use eligible::asking_for_ids;
pub(super) use eligible::{Eligible, eligibility};

/// A migratable request, as the relay needs it to ask another worker.
pub(super) struct Migration {
    pub(super) eligible: Eligible,
    /// The client's body (without the router's fields).
    pub(super) body: Bytes,
    /// The client's method, path and headers.
    pub(super) method: Method,
    pub(super) path_and_query: String,
    pub(super) headers: HeaderMap,
    /// The prompt's chain, for a restart from the client's request.
    pub(super) chain: Chain,
}

/// The worker an answer moved to.
pub(super) struct Moved {
    pub(super) resp: reqwest::Response,
    pub(super) guard: InFlightGuard,
    pub(super) url: String,
    pub(super) worker: String,
}

impl Proxy {
    /// Sends an answer's next request to the best worker not in `failed`
    /// (URLs): `continued`, a completion of `tokens` (else the client's
    /// request again); claimed and counted like any request.
    async fn reroute(
        &self,
        m: &Migration,
        continued: bool,
        body: Bytes,
        tokens: &[u32],
        failed: &[String],
    ) -> Result<Moved, String> {
        let resolved = self.prompts.pipelines().resolve(&m.eligible.model);
        let model = resolved.route_model.to_owned();
        let chain = if continued {
            Chain {
                hashes: resolved.pipeline.map_or_else(Vec::new, |p| {
                    p.block_hashes(tokens, m.eligible.salt.clone(), resolved.lora.clone())
                }),
                prompt_tokens: tokens.len() as u64,
                block_size: m.chain.block_size,
                tokens: None,
            }
        } else {
            m.chain.clone()
        };
        let (path, body) = if continued {
            ("/v1/completions", body)
        } else {
            (m.path_and_query.as_str(), sent_body(&m.eligible, &body))
        };
        let allowed = |url: &str| !failed.iter().any(|f| f == url);
        let decide = &self.decide;
        let (ranked, tracked) = decide
            .rank(&model, &chain, Some(&allowed))
            .instrument(tracing::info_span!(target: SPANS, "valkey"))
            .await
            .map_err(|e| format!("routing the continuation: {e}"))?;
        let mut last = String::from("no other live worker");
        for target in ranked.iter().take(decide.max_attempts) {
            let worker = &target.candidate.worker_id;
            let counted = decide.count(&model, target, &chain, tracked).await;
            let guard = decide.guard(&model, worker, counted);
            match self
                .upstream
                .send(&m.method, &target.url, path, &m.headers, body.clone())
                .await
            {
                Ok(resp) if resp.status().is_success() => {
                    return Ok(Moved {
                        resp,
                        guard,
                        url: target.url.clone(),
                        worker: worker.clone(),
                    });
                }
                Ok(resp) => last = format!("{worker}: HTTP {}", resp.status()),
                Err(e) => last = format!("{worker}: {e}"),
            }
        }
        Err(format!("no worker took the continuation ({last})"))
    }
}

impl Proxy {
    /// The response to a request sent to `worker` at `url`: relayed
    /// through migration when it is `migration`'s first success (a
    /// non-streamed one answered whole), else as it came (a broken event
    /// stream ends with an error event saying why the answer could not
    /// move; a JSON answer is held until whole, and one that breaks
    /// becomes a 502 error saying why).
    pub(super) async fn relay(
        self: &Arc<Self>,
        migration: &mut Result<Migration, &'static str>,
        resp: reqwest::Response,
        worker: &str,
        url: &str,
        guard: InFlightGuard,
        strip: Option<&str>,
    ) -> Response {
        match std::mem::replace(migration, Err("moved")) {
            Ok(m) if resp.status().is_success() && m.eligible.streamed => {
                let head = forward::head(&resp, worker, strip);
                let body = relay::body(Arc::clone(self), m, resp, url, guard);
                forward::with_body(head, axum::body::Body::from_stream(body), true)
            }
            Ok(m) if resp.status().is_success() => {
                let head = forward::head(&resp, worker, strip);
                relay::whole(Arc::clone(self), m, resp, url, guard, head).await
            }
            Ok(_) => forward::relay(resp, worker, guard, strip),
            Err(why) if resp.status().is_success() && forward::is_json(&resp) => {
                forward::relay_whole(resp, worker, guard, strip, why).await
            }
            Err(why) => forward::relay_noting(resp, worker, guard, strip, Some(why)),
        }
    }
}

/// The client's request, as a restart from it needs it.
pub(super) struct Client<'a> {
    pub(super) method: &'a Method,
    pub(super) path_and_query: &'a str,
    pub(super) headers: &'a HeaderMap,
    pub(super) chain: &'a Chain,
}

/// The request's migration when it is on and the request can move (else
/// why not), and the body to send: asking for `return_token_ids` when
/// it can move.
pub(super) fn prepare(
    settings: &MigrationSettings,
    eligible: Option<Result<Eligible, &'static str>>,
    client: &Client<'_>,
    body: Bytes,
) -> (Result<Migration, &'static str>, Bytes) {
    match plan(settings, eligible) {
        Ok(eligible) => {
            let sent = sent_body(&eligible, &body);
            let m = Migration {
                eligible,
                body,
                method: client.method.clone(),
                path_and_query: client.path_and_query.to_owned(),
                headers: client.headers.clone(),
                chain: client.chain.clone(),
            };
            (Ok(m), sent)
        }
        Err(why) => (Err(why), body),
    }
}

/// The client's `body` as a migratable request's worker gets it: asking
/// for the ids, and for a stream when the client did not.
fn sent_body(e: &Eligible, body: &Bytes) -> Bytes {
    if e.streamed {
        asking_for_ids(e, body)
    } else {
        assemble::as_stream(body)
    }
}

/// The request, when migration is on and it can move; else why not.
fn plan(
    settings: &MigrationSettings,
    eligible: Option<Result<Eligible, &'static str>>,
) -> Result<Eligible, &'static str> {
    if settings.limit == 0 {
        return Err("migration is off (--migration-limit 0)");
    }
    let e = eligible.unwrap_or(Err("not a completion"))?;
    if !e.streamed && !settings.unstreamed {
        return Err("not streamed (--migrate-unstreamed false)");
    }
    Ok(e)
}
