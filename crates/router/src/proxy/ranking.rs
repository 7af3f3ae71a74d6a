//! Ranking the workers for a request: the atomic cache-aware step, the
//! other policies over a read-only lookup, and the fallback without Valkey.

use std::time::Instant;

use super::candidates::{Target, targets};
use super::{Chain, Proxy, ProxyError};
use crate::routing::{CacheAwareConfig, Candidate, ConsistentHash, Policy, RouteRequest};
use state::{ROUTE_HEAD, StateError};

/// Which worker URLs a request may go to.
pub type UrlFilter<'a> = dyn Fn(&str) -> bool + Send + Sync + 'a;

impl Proxy {
    /// Ranked targets, and whether they came from the shared state (else
    /// from the fallback, where nothing is claimed or counted).
    pub(super) async fn rank(
        &self,
        model: &str,
        chain: &Chain,
    ) -> Result<(Vec<Target>, bool), ProxyError> {
        self.rank_within(model, chain, None).await
    }

    /// As [`rank`](Self::rank), over the workers whose URL `allowed`
    /// accepts (all without it). With a filter the choice is not made by
    /// the atomic script, which ranks every live worker: the policy ranks a
    /// read-only lookup, and the caller claims for its first choice.
    pub(super) async fn rank_within(
        &self,
        model: &str,
        chain: &Chain,
        allowed: Option<&UrlFilter<'_>>,
    ) -> Result<(Vec<Target>, bool), ProxyError> {
        let block_size = self
            .prompts
            .pipelines()
            .get(model)
            .map_or(16, |p| p.hasher.block_size());
        let request = RouteRequest {
            prompt_tokens: chain.prompt_tokens,
            prefix_key: chain.hashes.first().map_or(0, |h| h.0),
        };
        let keep = |mut all: Vec<Target>| {
            if let Some(allowed) = allowed {
                all.retain(|t| allowed(&t.url));
            }
            all
        };
        // With a filter, the atomic step chooses among the workers last
        // seen whose URL it accepts; without such a memory (a router's
        // first request), a read-only lookup ranks and the caller claims.
        let within: Vec<String> = allowed
            .map(|accepts| {
                self.fallback_targets(model, false)
                    .into_iter()
                    .filter(|t| accepts(&t.url))
                    .map(|t| t.candidate.worker_id)
                    .collect()
            })
            .unwrap_or_default();
        let atomic = self
            .atomic
            .as_ref()
            .filter(|_| allowed.is_none() || !within.is_empty());
        // Whether the shared state listed live workers before the filter.
        let mut listed = false;
        let shared = match atomic {
            Some(cfg) => self
                .route_and_claim(model, chain, cfg, &request, block_size, &within)
                .await
                .map(|ranked| {
                    listed = !ranked.is_empty();
                    // The script chose by the URLs last seen; a worker
                    // whose URL changed since is not allowed now: its count
                    // must not outlive this request.
                    if let (Some(first), Some(allowed)) = (ranked.first(), allowed)
                        && first.assigned
                        && !allowed(&first.url)
                    {
                        self.release(model, first);
                    }
                    keep(ranked)
                }),
            None => self.store.probe(model, &chain.hashes).await.map(|lookup| {
                let all = targets(&lookup, block_size);
                self.remember(model, &all);
                listed = !all.is_empty();
                self.order(self.policy.as_ref(), &request, keep(all))
            }),
        };
        match shared {
            // Live workers, none of them allowed: nothing to fall back to
            // (those seen recently are the same workers).
            Ok(ranked) if ranked.is_empty() && listed => Ok((ranked, true)),
            // Valkey answers but lists nobody: it may have restarted empty,
            // before the workers' next heartbeat. Workers seen live within a
            // lease are still the best guess.
            Ok(ranked) if ranked.is_empty() => {
                tracing::info!(
                    model,
                    "no live worker in the shared state; routing over workers seen within a lease"
                );
                Ok((keep(self.fallback(model, &request, true)), false))
            }
            Ok(ranked) => {
                self.observe_flow(model, &ranked);
                Ok((ranked, true))
            }
            Err(e) if e.is_unavailable() => {
                tracing::warn!(error = %e, model, "valkey unavailable; routing by consistent hash over known workers");
                Ok((keep(self.fallback(model, &request, false)), false))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The cache-aware first choice, made, claimed and counted by one atomic
    /// script call (among the workers `within` names, when it names any),
    /// followed by the other workers in policy order (retries).
    pub(super) async fn route_and_claim(
        &self,
        model: &str,
        chain: &Chain,
        cfg: &CacheAwareConfig,
        request: &RouteRequest,
        block_size: usize,
        within: &[String],
    ) -> Result<Vec<Target>, StateError> {
        let head = chain.hashes.len().min(ROUTE_HEAD);
        // A chain longer than one call: a read-only pass finds how far the
        // workers holding the whole head go.
        let hints: Vec<(String, usize)> = if chain.hashes.len() > ROUTE_HEAD {
            let full = self.store.probe(model, &chain.hashes).await?;
            full.workers
                .iter()
                .filter(|w| w.matched_blocks > head)
                .map(|w| (w.info.worker_id.clone(), w.matched_blocks - head))
                .collect()
        } else {
            Vec::new()
        };
        let params = cfg.route_params(
            request.prompt_tokens,
            block_size,
            rand::random::<u32>() % 1_000_003,
        );
        let outcome = self
            .store
            .route_and_claim_within(model, &chain.hashes[..head], &params, &hints, within)
            .await?;
        let mut all = targets(&outcome.lookup, block_size);
        for t in &mut all {
            let extra = hints.iter().find(|(w, _)| *w == t.candidate.worker_id);
            if let (true, Some((_, extra))) = (t.matched_blocks == head, extra) {
                t.matched_blocks += extra;
                t.candidate.cached_tokens = (t.matched_blocks * block_size) as u64;
                // On the tier of the head's last block, as route.lua counts it.
                let more = (extra * block_size) as u64;
                let c = &mut t.candidate;
                if c.disk_tokens > 0 {
                    c.disk_tokens += more;
                } else if c.cpu_tokens > 0 {
                    c.cpu_tokens += more;
                }
            }
        }
        self.remember(model, &all);
        let Some(chosen) = outcome.chosen else {
            return Ok(Vec::new());
        };
        let mut first = all.remove(chosen);
        first.assigned = true;
        first.prefill_tokens = outcome.prefill_tokens;
        // The chain's tail is claimed off the request's critical path.
        let from = outcome.covered.max(first.matched_blocks);
        if from < chain.hashes.len() {
            let (store, model, worker, chain) = (
                self.store.clone(),
                model.to_owned(),
                first.candidate.worker_id.clone(),
                chain.hashes.clone(),
            );
            tokio::spawn(async move {
                if let Err(e) = store.claim_prefix(&model, &worker, &chain, from).await {
                    tracing::debug!(error = %e, "claim of the chain's tail failed");
                }
            });
        }
        let mut ranked = vec![first];
        ranked.extend(self.order(self.policy.as_ref(), request, all));
        Ok(ranked)
    }

    /// Tells flow control whether the workers this decision saw are
    /// saturated, the first counting the request routed to it.
    fn observe_flow(&self, model: &str, ranked: &[Target]) {
        let Some(flow) = &self.flow else {
            return;
        };
        // The first is where the request goes (counted by the atomic step,
        // or by the caller right after).
        let counted: Vec<crate::routing::Candidate> = ranked
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut c = t.candidate.clone();
                if i == 0 {
                    c.in_flight += 1;
                    c.prefill_tokens += t.prefill_tokens;
                }
                c
            })
            .collect();
        flow.observe(model, counted.iter());
    }

    /// Takes back what the atomic step counted for `target` (the request
    /// will not go there), off the request path.
    fn release(&self, model: &str, target: &Target) {
        let done = state::InFlight {
            requests: -1,
            prefill_tokens: -i64::try_from(target.prefill_tokens).unwrap_or(i64::MAX),
        };
        let (store, model, worker) = (
            self.store.clone(),
            model.to_owned(),
            target.candidate.worker_id.clone(),
        );
        tokio::spawn(async move {
            if let Err(e) = store.change_in_flight(&model, &worker, done).await {
                tracing::debug!(error = %e, worker, "in-flight release lost; the router lease bounds it");
            }
        });
    }

    pub(super) fn order(
        &self,
        policy: &dyn Policy,
        request: &RouteRequest,
        targets: Vec<Target>,
    ) -> Vec<Target> {
        let candidates: Vec<Candidate> = targets.iter().map(|t| t.candidate.clone()).collect();
        let mut slots: Vec<Option<Target>> = targets.into_iter().map(Some).collect();
        policy
            .rank(request, &candidates)
            .into_iter()
            .filter_map(|i| slots.get_mut(i).and_then(Option::take))
            .collect()
    }

    /// The fallback ranking: consistent hashing over the workers last seen
    /// live (see [`fallback_targets`](Self::fallback_targets)); nothing is
    /// claimed or counted.
    fn fallback(&self, model: &str, request: &RouteRequest, recent_only: bool) -> Vec<Target> {
        let known = self.fallback_targets(model, recent_only);
        if !known.is_empty() {
            metrics::counter!("prefix_router_fallback_routes_total").increment(1);
        }
        self.order(&ConsistentHash::new(0.25), request, known)
    }

    /// Remembers the live workers a routing step saw, for the fallback. An
    /// empty list does not erase them: it is the case the fallback is for.
    pub(super) fn remember(&self, model: &str, targets: &[Target]) {
        if targets.is_empty() {
            return;
        }
        let workers = targets
            .iter()
            .map(|t| (t.candidate.worker_id.clone(), t.url.clone(), t.role))
            .collect();
        if let Ok(mut known) = self.known.write() {
            known.insert(model.to_owned(), (Instant::now(), workers));
        }
        self.gauges.record(model, targets);
    }

    /// The workers last seen live; with `recent_only`, only if seen within
    /// a worker lease (Valkey answers, so an older memory may be a worker
    /// that really left; while Valkey is away, any memory is better than
    /// none).
    fn fallback_targets(&self, model: &str, recent_only: bool) -> Vec<Target> {
        let known = self
            .known
            .read()
            .map(|k| match k.get(model) {
                Some((seen, workers)) if !recent_only || seen.elapsed() <= self.known_for => {
                    workers.clone()
                }
                _ => Vec::new(),
            })
            .unwrap_or_default();
        known
            .into_iter()
            .map(|(worker_id, url, role)| Target {
                candidate: Candidate {
                    worker_id,
                    ..Candidate::default()
                },
                url,
                matched_blocks: 0,
                assigned: false,
                prefill_tokens: 0,
                role,
            })
            .collect()
    }
}
