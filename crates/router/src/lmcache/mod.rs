//! LMCache as a state source (issue 31): the LMCache controller's view of
//! the KV chunks each instance's LMCache holds (CPU memory, disk), brought
//! into the cache-aware ranking as the tier it is, per worker.
//!
//! Two levels (docs/lmcache.md):
//!
//! * exact: for a prompt of at least `--lmcache-lookup-min-tokens`, the
//!   controller's `POST /lookup` with its token ids, under
//!   `--lmcache-deadline` (abandoned past it), its answer kept briefly
//!   (`lookup_cache`); what a worker holds there widens its candidate
//!   ([`widen`]) as tokens on the CPU or disk tier;
//! * coarse: each instance's chunk count, polled (`poll`), a tie-break
//!   between candidates of equal cost ([`tie_break`]) and shown by explain.
//!
//! The controller down or slow never stops routing: a failed or late
//! lookup routes without it, turns further lookups off for a second
//! (`backoff`), counts in `prefix_router_lmcache_lookups_total` and logs
//! at most one line in 30 s (`warn_limited`).
//!
//! * `reply`: the controller's answers and what they mean per worker.
//! * `lookup_cache`: recent answers, bounded.
//! * `poll`: the key-count poll loop.

mod lookup_cache;
mod poll;
mod reply;

pub use reply::Held;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use protocol::Tier;

use crate::config::LmCacheSettings;
use crate::routing::{CacheAware, CacheAwareConfig, Candidate, RouteRequest};
use lookup_cache::{LookupCache, prompt_key};
use reply::LookupReply;

/// How long an answer of the controller is reused for the same prompt.
const CACHE_TTL: Duration = Duration::from_secs(2);
/// The most answers kept.
const CACHE_ENTRIES: usize = 4096;
/// After a failed or late lookup, none is tried for this long.
const BACKOFF: Duration = Duration::from_secs(1);
/// At most one log line about the controller per this.
const WARN_EVERY: Duration = Duration::from_secs(30);

/// How one lookup went (the `outcome` label of
/// `prefix_router_lmcache_lookups_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The controller answered and some worker holds part of the prompt.
    Hit,
    /// It answered: nobody holds any.
    Miss,
    /// A recent answer for the same prompt was reused.
    Cached,
    /// Past the deadline: abandoned.
    Timeout,
    /// Unreachable or a bad answer.
    Error,
    /// Not asked: a recent lookup failed.
    Backoff,
    /// Not asked: the prompt is shorter than the threshold.
    Short,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Cached => "cached",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
            Outcome::Backoff => "backoff",
            Outcome::Short => "short",
        }
    }
}

/// The LMCache controller as the router reads it.
pub struct LmCache {
    settings: LmCacheSettings,
    client: reqwest::Client,
    cache: Mutex<LookupCache>,
    /// Chunks per worker id, from the last good poll.
    counts: RwLock<Arc<HashMap<String, u64>>>,
    /// No lookup before this (after a failure).
    backoff_until: Mutex<Option<Instant>>,
    /// The last log line about the controller, and lines suppressed since.
    warned: Mutex<(Option<Instant>, u64)>,
}

impl LmCache {
    /// A reader of the controller `settings` name.
    pub fn new(settings: LmCacheSettings) -> anyhow::Result<Arc<Self>> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.deadline.max(Duration::from_millis(100)))
            .pool_max_idle_per_host(16)
            .build()?;
        Ok(Arc::new(LmCache {
            settings,
            client,
            cache: Mutex::new(LookupCache::new(CACHE_TTL, CACHE_ENTRIES)),
            counts: RwLock::new(Arc::new(HashMap::new())),
            backoff_until: Mutex::new(None),
            warned: Mutex::new((None, 0)),
        }))
    }

    /// The settings.
    pub fn settings(&self) -> &LmCacheSettings {
        &self.settings
    }

    /// Chunks per worker id, as last polled.
    pub fn key_counts(&self) -> Arc<HashMap<String, u64>> {
        self.counts.read().map(|c| c.clone()).unwrap_or_default()
    }

    /// What each worker's LMCache holds of the prompt `tokens`, and how the
    /// lookup went; never longer than the deadline, empty on any failure.
    pub async fn lookup(&self, tokens: &[u32]) -> (Arc<[Held]>, Outcome) {
        let started = Instant::now();
        let (held, outcome) = self.lookup_inner(tokens).await;
        metrics::counter!("prefix_router_lmcache_lookups_total", "outcome" => outcome.as_str())
            .increment(1);
        if matches!(
            outcome,
            Outcome::Hit | Outcome::Miss | Outcome::Timeout | Outcome::Error
        ) {
            metrics::histogram!("prefix_router_lmcache_lookup_seconds")
                .record(started.elapsed().as_secs_f64());
        }
        (held, outcome)
    }

    async fn lookup_inner(&self, tokens: &[u32]) -> (Arc<[Held]>, Outcome) {
        let none: Arc<[Held]> = Arc::from(Vec::new());
        if (tokens.len() as u64) < self.settings.lookup_min_tokens {
            return (none, Outcome::Short);
        }
        let key = prompt_key(tokens);
        let now = Instant::now();
        if let Some(held) = self.cache.lock().ok().and_then(|c| c.get(key, now)) {
            return (held, Outcome::Cached);
        }
        if self
            .backoff_until
            .lock()
            .ok()
            .and_then(|b| *b)
            .is_some_and(|until| now < until)
        {
            return (none, Outcome::Backoff);
        }
        let url = format!("{}/lookup", self.settings.controller);
        let ask = async {
            let resp = self
                .client
                .post(&url)
                .json(&serde_json::json!({ "tokens": tokens }))
                .send()
                .await?
                .error_for_status()?;
            resp.json::<LookupReply>().await
        };
        match tokio::time::timeout(self.settings.deadline, ask).await {
            Ok(Ok(reply)) => {
                let held: Arc<[Held]> = Arc::from(reply.held(&self.settings, tokens.len() as u64));
                if let Ok(mut c) = self.cache.lock() {
                    c.insert(key, held.clone(), Instant::now());
                }
                self.set_up(true);
                let outcome = if held.is_empty() {
                    Outcome::Miss
                } else {
                    Outcome::Hit
                };
                (held, outcome)
            }
            Ok(Err(e)) => {
                self.failed(&format!("lookup failed: {e}"));
                (none, Outcome::Error)
            }
            Err(_) => {
                self.failed(&format!(
                    "lookup abandoned at the deadline ({:?})",
                    self.settings.deadline
                ));
                (none, Outcome::Timeout)
            }
        }
    }

    /// A failed lookup: no other for [`BACKOFF`], the gauge down, a line
    /// in the log at most every [`WARN_EVERY`].
    fn failed(&self, why: &str) {
        if let Ok(mut b) = self.backoff_until.lock() {
            *b = Some(Instant::now() + BACKOFF);
        }
        self.set_up(false);
        self.warn_limited(why);
    }

    fn set_up(&self, up: bool) {
        metrics::gauge!("prefix_router_lmcache_up").set(if up { 1.0 } else { 0.0 });
    }

    /// Logs `why` unless a line was logged within [`WARN_EVERY`] (those are
    /// counted and their number given with the next line).
    fn warn_limited(&self, why: &str) {
        let Ok(mut w) = self.warned.lock() else {
            return;
        };
        let now = Instant::now();
        if w.0.is_some_and(|at| now.duration_since(at) < WARN_EVERY) {
            w.1 += 1;
            return;
        }
        tracing::warn!(
            controller = %protocol::redact_url(&self.settings.controller),
            suppressed = w.1,
            "LMCache controller: {why}; routing goes on without its view"
        );
        *w = (Some(now), 0);
    }
}

/// `c` widened by what its LMCache holds (`held`, already for this
/// worker): tokens past the index's match count as held on LMCache's tier.
/// A shorter LMCache prefix adds nothing (the engine's own cache is
/// loaded first).
pub fn widen(c: &mut Candidate, held: &Held) {
    let Some(extra) = held.tokens.checked_sub(c.cached_tokens).filter(|e| *e > 0) else {
        return;
    };
    match held.tier {
        Tier::Disk => c.disk_tokens += extra,
        Tier::Cpu | Tier::Gpu => c.cpu_tokens += extra,
    }
    c.cached_tokens = held.tokens;
}

/// Reorders `ranked` (a cache-aware ranking, candidates by index) so that,
/// among neighbours of equal cost, the worker whose LMCache holds more
/// chunks comes first (the coarse signal; a stable reordering).
pub fn tie_break(
    ranked: &mut [usize],
    candidates: &[Candidate],
    cfg: &CacheAwareConfig,
    request: &RouteRequest,
    counts: &HashMap<String, u64>,
) {
    if counts.is_empty() || ranked.len() < 2 {
        return;
    }
    let scorer = CacheAware::new(*cfg);
    let cap = crate::routing::capacity(candidates, cfg.epsilon, cfg.load_slack);
    let shared = crate::routing::shared_tokens(cfg, candidates);
    let key = |i: usize| scorer.key(&candidates[i], request, cap, shared);
    let count = |i: usize| counts.get(&candidates[i].worker_id).copied().unwrap_or(0);
    let mut start = 0;
    while start < ranked.len() {
        let first = key(ranked[start]);
        let mut end = start + 1;
        while end < ranked.len() && key(ranked[end]) == first {
            end += 1;
        }
        ranked[start..end].sort_by_key(|&i| std::cmp::Reverse(count(i)));
        start = end;
    }
}

#[cfg(test)]
mod tests;
