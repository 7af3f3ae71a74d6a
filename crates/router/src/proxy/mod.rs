//! The routing path: from an OpenAI request to the best worker's response.
//!
//! Tokenize the prompt as the engine does, hash its full blocks, look up
//! which live worker holds the longest prefix and how loaded each is, let
//! the policy rank them, claim the blocks for the first choice (one atomic
//! call that also counts the request in flight), and forward. A worker that
//! fails before answering is replaced by the next in the ranking. Without
//! Valkey, the last known workers are ranked by consistent hashing.
//!
//! Split by what each part does, each using only those after it:
//!
//! * `pipeline`: the request pipeline of `serve` ([`Proxy::handle`]): the
//!   body read once on the CPU pool into a `crate::request::Request`
//!   (fields only the router sets taken out) that every later step takes,
//!   its prompt's chain (`prompts`), the response cache, admission
//!   (`admit`), flow control's gate (`flow_gate`), then the decision and
//!   the forwarding.
//! * `pick`: the endpoint picker's mode ([`Proxy::pick`]): the same steps
//!   up to the decision, without forwarding.
//! * `explain`: what the router would do with a request, changing nothing.
//! * `pd`: a model with prefill and decode workers, served disaggregated
//!   (`Serving`) or picked for the endpoint picker (`pd::pick`), from one
//!   plan (`plan`) and the steps both share (`steps`).
//! * `decision`: the routing decision ([`decision::Decider`]): the atomic
//!   cache-aware step or a policy over a probe, the fallback over the
//!   workers last seen (`known`), claims and in-flight counts for the
//!   workers the atomic step did not count (`assign`), the metrics of a
//!   decision (`outcome`), the workers' load gauges.
//! * `forward`: the HTTP client and the relay of a worker's answer
//!   (headers only the router sets, `protocol::headers::RESERVED`, are
//!   dropped as it is sent); `orca`: the load a worker reports in it.
//! * `migrate`: a streamed answer whose worker fails mid-answer moves to
//!   another worker and goes on in the same client stream (issue 29);
//!   `forward`'s relay hands migratable answers to it.
//! * `inflight`: [`InFlightGuard`], a request's count on its worker until
//!   it ends; `cpu_pool`: where prompts are parsed and tokenized; `error`.

mod cpu_pool;
mod decision;
mod error;
mod explain;
mod forward;
mod inflight;
mod migrate;
mod orca;
mod pd;
mod pick;
mod pipeline;

pub use cpu_pool::{CpuPool, PoolBusy};
pub use error::ProxyError;
pub use forward::Upstream;
pub use inflight::InFlightGuard;
pub use migrate::DRAIN_REFRESH;
pub use pick::Pick;
pub use pipeline::Endpoint;

use std::sync::Arc;

use crate::admission::Admission;
use crate::config::MigrationSettings;
use crate::flow::FlowControl;
use crate::response_cache::ResponseCache;
use crate::routing::{CacheAwareConfig, Policy};
use state::StateStore;
use tokenize::ModelPipelines;

use decision::Decider;
use pipeline::Prompts;

/// The routing path, shared by all requests.
pub struct Proxy {
    /// Pipelines and the prompt limit, shared with the pool's jobs.
    prompts: Arc<Prompts>,
    /// Where prompts are tokenized and hashed.
    pool: CpuPool,
    /// The routing decision.
    decide: Decider,
    upstream: Upstream,
    /// Answers identical deterministic requests, when enabled.
    cache: Option<ResponseCache>,
    /// Flow control, when on: the waiting room asked right before routing.
    flow: Option<Arc<FlowControl>>,
    /// Tenants, classes and their limits.
    admission: Arc<Admission>,
    /// Mid-stream migration (`migrate`).
    migration: MigrationSettings,
    /// The drain deadlines relays watch (`migrate::DrainWatch`).
    drains: migrate::DrainWatch,
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
        let drains = migrate::DrainWatch::default();
        let mut decide = Decider::new(store.clone(), policy, atomic, max_attempts);
        decide.draining = drains.subscribe();
        Proxy {
            admission: Arc::new(Admission::new(Default::default(), store)),
            prompts: Prompts::new(pipelines, None),
            pool: CpuPool::new(
                (std::thread::available_parallelism().map_or(2, usize::from) / 2).max(1),
                64,
            ),
            decide,
            upstream,
            cache: None,
            flow: None,
            migration: MigrationSettings::default(),
            drains,
        }
    }

    /// The drain deadlines this router knows: `serve` refreshes them, the
    /// admin drain at once.
    pub fn drains(&self) -> &migrate::DrainWatch {
        &self.drains
    }

    /// Moves answers whose worker fails mid-stream by `settings`
    /// (default: 3 times, 30 s stall timeout).
    pub fn with_migration(mut self, settings: MigrationSettings) -> Self {
        self.migration = settings;
        self
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

    /// Holds requests in the waiting room while the workers are saturated
    /// (off unless given).
    pub fn with_flow_control(mut self, flow: Option<Arc<FlowControl>>) -> Self {
        self.decide.flow = flow.clone();
        self.flow = flow;
        self
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
        self.decide.pd.skip_share = share;
        self
    }

    /// Chooses a disaggregated request's prefill worker by `policy`
    /// (default: cache-aware).
    pub fn with_pd_prefill_policy(mut self, policy: crate::routing::PrefillPolicy) -> Self {
        self.decide.pd.prefill = policy;
        self
    }

    /// Keeps workers seen live as fallback targets for `d` (the worker
    /// lease: after it, a worker that stopped heartbeating is gone).
    pub fn with_known_for(mut self, d: std::time::Duration) -> Self {
        self.decide.known.known_for = d;
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

    /// Reads the LMCache controller `lmcache` (none by default): prompts of
    /// at least its threshold keep their token ids for its lookup.
    pub fn with_lmcache(mut self, lmcache: Option<Arc<crate::lmcache::LmCache>>) -> Self {
        if let Some(lm) = &lmcache {
            self.prompts = self
                .prompts
                .keeping_tokens_from(lm.settings().lookup_min_tokens);
        }
        self.decide.lmcache = lmcache;
        self
    }

    /// The LMCache controller, when read.
    pub fn lmcache(&self) -> Option<Arc<crate::lmcache::LmCache>> {
        self.decide.lmcache.clone()
    }

    /// Whether any worker was seen live (the fallback has somewhere to go).
    pub fn knows_workers(&self) -> bool {
        self.decide.known.any()
    }
}
