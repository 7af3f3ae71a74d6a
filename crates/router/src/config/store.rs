//! The shared state's settings of `serve`: the Valkey connection, the
//! sharding of each model's state, the key namespace, entry and lease
//! lifetimes, the cap on models, and gc's period.

use std::time::Duration;

use anyhow::{Context, bail};

use super::ServeArgs;
use super::file::{FileConfig, file_duration};
use state::{ConnectionSettings, ModelLimits, Sharding, StateTtls};

/// How a router reaches and keeps the shared state.
pub(super) struct StoreSettings {
    pub valkey: ConnectionSettings,
    pub sharding: Sharding,
    pub key_prefix: String,
    pub ttls: StateTtls,
    pub model_limits: ModelLimits,
    pub gc_interval: Duration,
}

/// Flags over the file over the defaults (the keys read are taken).
pub(super) fn resolve(
    args: &mut ServeArgs,
    file: &mut FileConfig,
) -> anyhow::Result<StoreSettings> {
    let defaults = StateTtls::default();
    let ttls = StateTtls {
        speculative: args
            .speculative_ttl
            .or(file_duration(
                file.speculative_ttl.take(),
                "speculative_ttl",
            )?)
            .unwrap_or(defaults.speculative),
        confirmed: args
            .confirmed_ttl
            .or(file_duration(file.confirmed_ttl.take(), "confirmed_ttl")?)
            .unwrap_or(defaults.confirmed),
        worker_lease: args
            .worker_lease
            .or(file_duration(file.worker_lease.take(), "worker_lease")?)
            .unwrap_or(defaults.worker_lease),
        router_lease: args
            .router_lease
            .or(file_duration(file.router_lease.take(), "router_lease")?)
            .unwrap_or(defaults.router_lease),
        ..defaults
    };
    let mut valkey = ConnectionSettings::new(
        &args
            .valkey
            .take()
            .or(file.valkey.take())
            .unwrap_or_else(|| "redis://127.0.0.1:6379".into()),
    );
    if let Some(t) = args
        .valkey_timeout
        .or(file_duration(file.valkey_timeout.take(), "valkey_timeout")?)
    {
        valkey.hot_timeout = t;
    }
    let cluster = valkey.url.contains(',');
    let sharding = Sharding {
        shards: args
            .shards
            .or(file.shards)
            .unwrap_or(if cluster { 6 } else { 1 }),
        family_blocks: args
            .family_blocks
            .or(file.family_blocks)
            .unwrap_or(protocol::family::DEFAULT_FAMILY_BLOCKS),
    };
    sharding.check().context("--shards / --family-blocks")?;
    let defaults_m = ModelLimits::default();
    let model_limits = ModelLimits {
        max_models: args
            .max_models
            .or(file.max_models)
            .unwrap_or(defaults_m.max_models),
        grace: args
            .model_grace
            .or(file_duration(file.model_grace.take(), "model_grace")?)
            .unwrap_or(defaults_m.grace),
    };
    if model_limits.max_models == 0 {
        bail!("--max-models must be positive");
    }
    Ok(StoreSettings {
        valkey,
        sharding,
        key_prefix: args
            .key_prefix
            .take()
            .or(file.key_prefix.take())
            .unwrap_or_else(|| "pr".into()),
        ttls,
        model_limits,
        gc_interval: args
            .gc_interval
            .or(file_duration(file.gc_interval.take(), "gc_interval")?)
            .unwrap_or(Duration::from_secs(1)),
    })
}
