//! What a router is built of, from its config: the store, the models'
//! pipelines, the routing path.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::admission::Admission;
use crate::config::ServeConfig;
use crate::flow::FlowControl;
use crate::lmcache::LmCache;
use crate::proxy::{CpuPool, Proxy, Upstream};
use crate::response_cache::ResponseCache;
use crate::routing::policy_by_name;
use state::StateStore;
use tokenize::ModelPipelines;

/// Builds the store described by `cfg`.
pub(super) fn build_store(cfg: &ServeConfig) -> anyhow::Result<StateStore> {
    let store = StateStore::new(
        cfg.valkey.clone(),
        &cfg.key_prefix,
        &cfg.router_id,
        cfg.ttls.clone(),
        cfg.limits.clone(),
    )
    .context("configuring the valkey store")?;
    store.set_model_limits(cfg.model_limits);
    store
        .set_sharding(cfg.sharding)
        .context("configuring the valkey store")?;
    Ok(store)
}

/// Every configured model's pipeline (tokenizer, block size, seed) and
/// LoRA adapters.
fn build_pipelines(cfg: &ServeConfig) -> anyhow::Result<ModelPipelines> {
    let pipelines = crate::models::pipelines(&cfg.models)?;
    if cfg.models.is_empty() {
        tracing::warn!(
            "no --model/--tokenizer-dir nor [[models]]: requests are routed by load only, without prefix locality"
        );
    }
    Ok(pipelines)
}

/// The routing path: the configured models' pipelines, policy and client.
pub(super) fn build_proxy(cfg: &ServeConfig, store: StateStore) -> anyhow::Result<Proxy> {
    let pipelines = build_pipelines(cfg)?;
    let cache_aware = cfg.cache_aware;
    let policy = policy_by_name(&cfg.policy, cache_aware)
        .with_context(|| format!("unknown policy {:?}", cfg.policy))?;
    let threads = cfg.valkey.serving_threads;
    let upstream =
        Upstream::new(Duration::from_secs(2), threads).context("building the HTTP client")?;
    let atomic = (policy.name() == "cache_aware").then_some(cache_aware);
    let cache = (cfg.response_cache.clone())
        .map(|s| ResponseCache::new(store.clone(), s, cfg.valkey.hot_timeout));
    let flow = (cfg.flow.clone()).map(|s| FlowControl::new(store.clone(), s));
    let admission = Arc::new(Admission::new(cfg.admission.clone(), store.clone()));
    let lmcache = (cfg.lmcache.clone())
        .map(LmCache::new)
        .transpose()
        .context("building the LMCache controller's client")?;
    let proxy = Proxy::new(store, pipelines, policy, atomic, upstream, cfg.max_attempts)
        .with_admission(admission);
    let proxy = match cfg.max_prompt_tokens {
        Some(max) => proxy.with_max_prompt_tokens(max),
        None => proxy,
    };
    Ok(proxy
        .with_cpu_pool(
            CpuPool::new(cfg.tokenize_threads, cfg.tokenize_queue)
                .inline_up_to(cfg.tokenize_inline_bytes),
        )
        .with_known_for(cfg.ttls.worker_lease)
        .with_pd_skip_prefill_share(cfg.pd_skip_prefill_share)
        .with_pd_prefill_policy(cfg.pd_prefill_policy)
        .with_response_cache(cache)
        .with_migration(cfg.migration)
        .with_lmcache(lmcache)
        .with_flow_control(flow))
}
