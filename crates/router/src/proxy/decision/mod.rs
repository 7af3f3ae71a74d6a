//! The routing decision: which workers a request goes to, best first.
//! [`Decider`] ranks the workers from the shared state (the atomic
//! cache-aware step, or the other policies over a read-only probe), falls
//! back to the workers last seen live when Valkey is away (`known`), and
//! claims and counts the request for a worker the atomic step did not
//! (`assign`), and widens the candidates by what the workers' LMCache
//! holds of the prompt (`lmcache`, when `--lmcache-controller` is set).
//! Its input is a prompt's [`Chain`]; its output, [`Target`]s.
//! Both modes (`serve`'s pipeline and the endpoint picker's pick) and the
//! P/D steps (`pd`) decide through it.

mod assign;
mod candidates;
mod known;
mod lmcache;
mod outcome;
mod worker_gauges;

pub use candidates::{Target, targets};
pub use lmcache::widen_targets;
pub use outcome::{decision, phase, record_outcome};

use std::sync::Arc;

use protocol::hashing::BlockHash;
use state::{StateError, StateStore};

use super::{InFlightGuard, ProxyError};
use crate::flow::FlowControl;
use crate::routing::{
    CacheAwareConfig, Candidate, ConsistentHash, Policy, PrefillPolicy, RouteRequest,
};
use known::Known;

/// A request's prompt, reduced to what routing needs.
#[derive(Clone)]
pub struct Chain {
    pub hashes: Vec<BlockHash>,
    pub prompt_tokens: u64,
    /// Tokens per block of the routed model's engines (16 without a
    /// pipeline): converts matched blocks to tokens.
    pub block_size: usize,
    /// The prompt's token ids, kept only for the LMCache controller's
    /// lookup (`--lmcache-controller`, prompts past its threshold).
    pub tokens: Option<Arc<Vec<u32>>>,
}

impl Chain {
    /// The prompt tokens `target` does not hold: what it prefills.
    pub fn uncached(&self, target: &Target) -> u64 {
        self.prompt_tokens
            .saturating_sub(target.candidate.cached_tokens)
    }

    /// What the policies weigh of this prompt.
    pub fn request(&self) -> RouteRequest {
        RouteRequest {
            prompt_tokens: self.prompt_tokens,
            prefix_key: self.hashes.first().map_or(0, |h| h.0),
        }
    }
}

/// Which worker URLs a request may go to.
pub type UrlFilter<'a> = dyn Fn(&str) -> bool + Send + Sync + 'a;

/// Draining workers by URL: their model and drain deadline (the marks this
/// router last read, `migrate::DrainWatch`).
pub type Deadlines = Arc<std::collections::HashMap<String, (String, tokio::time::Instant)>>;

/// How disaggregated requests are decided (`--pd-*`).
#[derive(Debug, Clone, Copy)]
pub struct PdSettings {
    /// `--pd-skip-prefill-share`: a decode worker holding more of a prompt
    /// than this share computes it without a prefill worker.
    pub skip_share: f64,
    /// `--pd-prefill-policy`: how a disaggregated request's prefill worker
    /// is chosen.
    pub prefill: PrefillPolicy,
}

impl Default for PdSettings {
    fn default() -> Self {
        PdSettings {
            skip_share: 0.8,
            prefill: PrefillPolicy::default(),
        }
    }
}

/// The routing decision, shared by all requests.
pub struct Decider {
    pub(in crate::proxy) store: StateStore,
    pub(in crate::proxy) policy: Arc<dyn Policy>,
    /// Set for the cache-aware policy: its first choice is made by the
    /// atomic routing script with these parameters.
    pub(in crate::proxy) atomic: Option<CacheAwareConfig>,
    /// At most this many workers are tried for one request.
    pub(in crate::proxy) max_attempts: usize,
    /// Last workers seen live per model: the fallback.
    pub(in crate::proxy) known: Known,
    /// Flow control, when on: told what each decision saw.
    pub(in crate::proxy) flow: Option<Arc<FlowControl>>,
    /// How disaggregated requests are decided.
    pub(in crate::proxy) pd: PdSettings,
    /// The LMCache controller, when read (`--lmcache-controller`).
    pub(in crate::proxy) lmcache: Option<Arc<crate::lmcache::LmCache>>,
    /// The workers this router knows are draining: the fallback (Valkey
    /// away) sends them nothing new either.
    pub(in crate::proxy) draining: tokio::sync::watch::Receiver<Deadlines>,
}

impl Decider {
    /// A decider over `store` with `policy`, trying at most `max_attempts`.
    pub fn new(
        store: StateStore,
        policy: Arc<dyn Policy>,
        atomic: Option<CacheAwareConfig>,
        max_attempts: usize,
    ) -> Self {
        Decider {
            store,
            policy,
            atomic,
            max_attempts: max_attempts.max(1),
            known: Known::default(),
            flow: None,
            pd: PdSettings::default(),
            lmcache: None,
            draining: tokio::sync::watch::channel(Deadlines::default()).1,
        }
    }

    /// A guard of the request counted on `worker` with `counted` prefill
    /// tokens (`None`: not counted).
    pub fn guard(&self, model: &str, worker: &str, counted: Option<u64>) -> InFlightGuard {
        InFlightGuard::new(self.store.clone(), model, worker, counted)
    }

    /// Ranked targets (only those whose URL `allowed` accepts, when
    /// given), and whether they came from the shared state (else from the
    /// fallback, where nothing is claimed or counted). With a filter the
    /// choice is not made by the atomic script over every live worker: it
    /// chooses among the workers last seen whose URL the filter accepts,
    /// or, without such a memory (a router's first request), the policy
    /// ranks a read-only probe and the caller claims for its first choice.
    pub async fn rank(
        &self,
        model: &str,
        chain: &Chain,
        allowed: Option<&UrlFilter<'_>>,
    ) -> Result<(Vec<Target>, bool), ProxyError> {
        let block_size = chain.block_size;
        let request = chain.request();
        let keep = |mut all: Vec<Target>| {
            if let Some(allowed) = allowed {
                all.retain(|t| allowed(&t.url));
            }
            all
        };
        let within: Vec<String> = allowed
            .map(|accepts| {
                self.known
                    .targets(model, false)
                    .into_iter()
                    .filter(|t| accepts(&t.url))
                    .map(|t| t.candidate.worker_id)
                    .collect()
            })
            .unwrap_or_default();
        // What the workers' LMCache hold of the prompt: when any holds
        // some, the policy ranks a probe widened by it (the atomic script
        // does not know LMCache's view).
        let held = match self.lmcache_held(chain).await {
            Some((held, _)) => held,
            None => Arc::from(Vec::new()),
        };
        let atomic = self
            .atomic
            .as_ref()
            .filter(|_| allowed.is_none() || !within.is_empty())
            .filter(|_| held.is_empty());
        // Whether the shared state listed live workers before the filter.
        let mut listed = false;
        let shared = match atomic {
            Some(cfg) => self.route(model, chain, cfg, &within).await.map(|ranked| {
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
                let mut all = targets(&lookup, block_size);
                self.known.remember(model, &all);
                listed = !all.is_empty();
                widen_targets(&mut all, &held);
                self.order_with_lmcache(&request, keep(all))
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

    /// The cache-aware first choice, made, claimed and counted by one call
    /// of the store (`StateStore::route_chain`, among the workers `within`
    /// names, when it names any), followed by the other workers in policy
    /// order (retries).
    pub async fn route(
        &self,
        model: &str,
        chain: &Chain,
        cfg: &CacheAwareConfig,
        within: &[String],
    ) -> Result<Vec<Target>, StateError> {
        let (block_size, request) = (chain.block_size, chain.request());
        let params = cfg.route_params(
            request.prompt_tokens,
            block_size,
            rand::random::<u32>() % 1_000_003,
        );
        let outcome = self
            .store
            .route_chain(model, &chain.hashes, &params, within)
            .await?;
        let mut all = targets(&outcome.lookup, block_size);
        self.known.remember(model, &all);
        let Some(chosen) = outcome.chosen else {
            return Ok(Vec::new());
        };
        let mut first = all.remove(chosen);
        first.assigned = true;
        first.prefill_tokens = outcome.prefill_tokens;
        // The chain's tail is claimed off the request's critical path.
        let from = outcome.tail_from;
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
        ranked.extend(order(self.policy.as_ref(), &request, all, |_, _| {}));
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
        let counted: Vec<Candidate> = ranked
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
    /// will not go there), in the store's next batch.
    fn release(&self, model: &str, target: &Target) {
        let done = state::InFlight {
            requests: -1,
            prefill_tokens: -i64::try_from(target.prefill_tokens).unwrap_or(i64::MAX),
        };
        let worker = &target.candidate.worker_id;
        if let Err(e) = self.store.release_in_flight(model, worker, done) {
            tracing::debug!(error = %e, worker, "in-flight release lost; the router lease bounds it");
        }
    }

    /// The fallback ranking: consistent hashing over the workers last seen
    /// live (see [`Known::targets`]); nothing is claimed or counted.
    fn fallback(&self, model: &str, request: &RouteRequest, recent_only: bool) -> Vec<Target> {
        let mut known = self.known.targets(model, recent_only);
        {
            let draining = self.draining.borrow();
            known.retain(|t| !draining.contains_key(&t.url));
        }
        if !known.is_empty() {
            metrics::counter!("prefix_router_fallback_routes_total").increment(1);
        }
        order(&ConsistentHash::new(0.25), request, known, |_, _| {})
    }
}

/// `targets` in `policy`'s order: the policy ranks their candidates,
/// moved out of the targets and back (nothing copied), and `tie_break`
/// may reorder that ranking (indices into the candidates) before the
/// targets are put in it.
pub fn order(
    policy: &dyn Policy,
    request: &RouteRequest,
    mut targets: Vec<Target>,
    tie_break: impl FnOnce(&mut [usize], &[Candidate]),
) -> Vec<Target> {
    let candidates: Vec<Candidate> = targets
        .iter_mut()
        .map(|t| std::mem::take(&mut t.candidate))
        .collect();
    let mut ranked = policy.rank(request, &candidates);
    tie_break(&mut ranked, &candidates);
    let mut slots: Vec<Option<Target>> = targets
        .into_iter()
        .zip(candidates)
        .map(|(mut t, c)| {
            t.candidate = c;
            Some(t)
        })
        .collect();
    ranked
        .into_iter()
        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
        .collect()
}
