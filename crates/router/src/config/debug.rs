//! `ServeConfig`'s `Debug`: every setting an operator may want in a log,
//! with the Valkey password and the internal token redacted.

use super::{LmCacheSettings, ServeConfig};

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("listen", &self.listen)
            .field("internal_listen", &self.internal_listen)
            .field("valkey", &protocol::redact_url(&self.valkey.url))
            .field("valkey_hot_timeout", &self.valkey.hot_timeout)
            .field("sharding", &self.sharding)
            .field("key_prefix", &self.key_prefix)
            .field("workers", &self.workers)
            .field("model", &self.model)
            .field("tokenizer_dir", &self.tokenizer_dir)
            .field(
                "internal_token",
                &self.internal_token.as_ref().map(|_| "<redacted>"),
            )
            .field("router_id", &self.router_id)
            .field("ttls", &self.ttls)
            .field("limits", &self.limits)
            .field("gc_interval", &self.gc_interval)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("client_timeout", &self.client_timeout)
            .field("async_threads", &self.async_threads)
            .field("max_prompt_tokens", &self.max_prompt_tokens)
            .field("policy", &self.policy)
            .field("block_size", &self.block_size)
            .field("hash_seed", &self.hash_seed)
            .field("max_attempts", &self.max_attempts)
            .field("loras", &self.loras)
            .field("models", &self.models)
            .field("scrape_metrics_interval", &self.scrape_metrics_interval)
            .field("cache_aware", &self.cache_aware)
            .field("pd_skip_prefill_share", &self.pd_skip_prefill_share)
            .field("pd_prefill_policy", &self.pd_prefill_policy)
            .field("epp", &self.epp)
            .field("response_cache", &self.response_cache)
            .field("flow", &self.flow)
            .field("migration", &self.migration)
            .field("admission", &self.admission)
            .field(
                "lmcache",
                &self.lmcache.as_ref().map(|l| LmCacheSettings {
                    controller: protocol::redact_url(&l.controller),
                    ..l.clone()
                }),
            )
            .finish()
    }
}
