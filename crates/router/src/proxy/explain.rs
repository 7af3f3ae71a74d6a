//! [`Proxy::explain`]: what the router would do with a request, and why,
//! without changing any state; for a disaggregated model, both picks and
//! whether the prefill is skipped ([`PdPlan`]).

use serde_json::{Value, json};

use std::sync::Arc;

use super::decision::{Decider, targets, widen_targets};
use super::pd::{self, PdPlan, disaggregated};
use super::pipeline::{Endpoint, Parsed, explain_admission};
use super::{Proxy, ProxyError};
use crate::lmcache::{Held, Outcome};
use crate::routing::{
    CacheAware, Candidate, batch_requests, capacity, effective_tokens, queued_requests,
    shared_tokens, within,
};
use protocol::WorkerRole;

impl Proxy {
    /// The routing decision for `body` (a completions or chat request,
    /// told apart by `messages`), from a read-only lookup: the prompt's
    /// blocks, every candidate with its match, load and score, and the
    /// choice; and the admission decision for a request with `headers`.
    pub async fn explain(
        &self,
        headers: &axum::http::HeaderMap,
        body: &bytes::Bytes,
    ) -> Result<Value, ProxyError> {
        let (parsed, _) = self.read(None, body.clone(), None).await?;
        let admission = explain_admission(&self.admission, headers, &parsed).await;
        let endpoint = Endpoint::of_body(&parsed.request);
        let Parsed { model, chain, .. } = parsed;
        let decide = &self.decide;
        let block_size = chain.block_size;
        let lookup = decide.store.probe_with_gaps(&model, &chain.hashes).await?;
        let mut all = targets(&lookup, block_size);
        let lmcache = decide.lmcache_held(&chain).await;
        if let Some((held, _)) = &lmcache {
            widen_targets(&mut all, held);
        }
        let candidates: Vec<Candidate> = all.iter().map(|t| t.candidate.clone()).collect();
        let request = chain.request();
        let cfg = decide.atomic.unwrap_or_default();
        let scorer = CacheAware::new(cfg);
        let cap = capacity(&candidates, cfg.epsilon, cfg.load_slack);
        let shared = shared_tokens(&cfg, &candidates);
        let order = decide.policy.rank(&request, &candidates);
        let rows: Vec<Value> = order
            .iter()
            .enumerate()
            .map(|(rank, &i)| {
                let (t, c) = (&all[i], &candidates[i]);
                json!({
                    "rank": rank + 1,
                    "worker_id": c.worker_id,
                    "role": t.role,
                    "url": t.url,
                    "matched_blocks": t.matched_blocks,
                    "matched_tokens": c.cached_tokens,
                    "matched_tokens_by_tier": by_tier(c),
                    "effective_cached_tokens": effective_tokens(&cfg, c),
                    "in_flight": c.in_flight,
                    "prefill_tokens": c.prefill_tokens,
                    "batch": batch_requests(c, cfg.max_num_seqs),
                    "queued": queued_requests(c, cfg.max_num_seqs),
                    "waiting": c.waiting,
                    "running": c.running,
                    "kv_cache_usage_perc": c.kv_usage,
                    "load": c.load(),
                    "within_load_bound": within(c, cap),
                    "score_tokens": scorer.cost(&request, c, shared),
                    "lmcache": lmcache_row(decide, &lmcache, &c.worker_id),
                })
            })
            .collect();
        let mut chosen = order.first().map(|&i| {
            let (t, c) = (&all[i], &candidates[i]);
            let deeper = all.iter().map(|o| o.matched_blocks).max().unwrap_or(0);
            let reason = if effective_tokens(&cfg, c) < shared {
                format!("shared: most workers hold the first {shared} tokens (tier-weighted), which count as cached on every worker (hotspot guard); this one, holding {}, is chosen by load and will hold them too", c.cached_tokens)
            } else if c.cached_tokens > (t.matched_blocks * block_size) as u64 {
                format!("hit: {} cached tokens, {} of them only in its LMCache (weighted by tier), at an acceptable load", c.cached_tokens, c.cached_tokens - (t.matched_blocks * block_size) as u64)
            } else if deeper > t.matched_blocks {
                format!("spill: a worker holding {deeper} blocks is over the load bound or costs more; this one holds {}", t.matched_blocks)
            } else if t.matched_blocks > 0 && c.cpu_tokens + c.disk_tokens > 0 {
                format!("hit: {} cached tokens, {} of them off the GPU (weighted by tier), at an acceptable load", c.cached_tokens, c.cpu_tokens + c.disk_tokens)
            } else if t.matched_blocks > 0 {
                format!("hit: the deepest cached prefix ({} tokens) at an acceptable load", c.cached_tokens)
            } else {
                "miss: no worker holds the prompt's first block; chosen by load".to_owned()
            };
            json!({ "worker_id": c.worker_id, "reason": reason })
        });
        // The decode workers matched as serving matches them (gap probes
        // among them alone); the prefill workers as the atomic step does.
        let mut pd_all = all.clone();
        if disaggregated(all.iter().map(|t| t.role)) {
            let decoders = |w: &state::WorkerInfo| w.role != WorkerRole::Prefill;
            let lookup = decide
                .store
                .probe_with_gaps_among(&model, &chain.hashes, decoders)
                .await?;
            for d in targets(&lookup, block_size) {
                if let Some(t) = pd_all.iter_mut().find(|t| {
                    t.role != WorkerRole::Prefill && t.candidate.worker_id == d.candidate.worker_id
                }) {
                    *t = d;
                }
            }
        }
        let disaggregation =
            PdPlan::new(&pd_all, &cfg, &request, decide.pd.skip_share).map(|plan| {
                // The prefill pick: the prefill policy among the prefill
                // workers alone, as the atomic step restricted to them makes it.
                let prefill: Vec<Candidate> =
                    plan.prefill.iter().map(|t| t.candidate.clone()).collect();
                let among = shared_tokens(&cfg, &prefill);
                let pick = pd::prefill_policy(decide)
                    .rank(&request, &prefill)
                    .first()
                    .map(|&i| (&plan.prefill[i], scorer.cost(&request, &prefill[i], among)));
                if let Some(d) = plan.decode.first() {
                    chosen =
                        Some(json!({ "worker_id": d.candidate.worker_id, "reason": plan.why }));
                }
                plan.explain(pick, decide.pd.skip_share, decide.pd.prefill)
            });
        let mut explained = json!({
            "model": model,
            "endpoint": if endpoint == Endpoint::ChatCompletions { "chat" } else { "completions" },
            "policy": decide.policy.name(),
            "prompt_tokens": chain.prompt_tokens,
            "block_size": block_size,
            "block_hashes": chain.hashes.iter().map(|h| h.to_hex()).collect::<Vec<_>>(),
            "load_bound": cap,
            "candidates": rows,
            "chosen": chosen,
            "admission": admission,
        });
        if let Some(d) = disaggregation {
            explained["disaggregation"] = d;
        }
        if let Some(lm) = &decide.lmcache {
            explained["lmcache"] = json!({
                "controller": protocol::redact_url(&lm.settings().controller),
                "lookup": lmcache.as_ref().map_or("short", |(_, o)| o.as_str()),
                "lookup_min_tokens": lm.settings().lookup_min_tokens,
            });
        }
        explained["flow"] = match &self.flow {
            Some(flow) => flow.explain(&model, candidates.iter()),
            None => json!({ "enabled": false, "decision": "route now: flow control is off" }),
        };
        Ok(explained)
    }
}

/// What a worker's LMCache holds of the prompt, for explain: `null`
/// without LMCache; its tokens, tier and location (0 tokens when none),
/// and its chunk count as last polled.
fn lmcache_row(decide: &Decider, lookup: &Option<(Arc<[Held]>, Outcome)>, worker: &str) -> Value {
    let Some(lm) = &decide.lmcache else {
        return Value::Null;
    };
    let held = lookup
        .as_ref()
        .and_then(|(held, _)| held.iter().find(|h| h.worker_id == worker));
    json!({
        "tokens": held.map_or(0, |h| h.tokens),
        "tier": held.map(|h| h.tier),
        "location": held.map(|h| h.location.clone()),
        "key_count": lm.key_counts().get(worker).copied(),
    })
}

/// A candidate's matched tokens per KV tier, for explain.
fn by_tier(c: &Candidate) -> Value {
    let lower = c.cpu_tokens + c.disk_tokens;
    json!({
        "gpu": c.cached_tokens.saturating_sub(lower),
        "cpu": c.cpu_tokens,
        "disk": c.disk_tokens,
    })
}
