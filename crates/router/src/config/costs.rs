//! The cache-aware policy's weights from flags and file: what a worker's
//! load costs against what its cache saves.

use anyhow::bail;

use super::args::ServeArgs;
use super::file::FileConfig;
use crate::routing::CacheAwareConfig;

/// The policy's parameters: each flag, else the file, else the default.
pub(super) fn cache_aware(args: &ServeArgs, file: &FileConfig) -> anyhow::Result<CacheAwareConfig> {
    let d = CacheAwareConfig::default();
    Ok(CacheAwareConfig {
        epsilon: weight(
            "epsilon",
            args.epsilon.or(file.epsilon).unwrap_or(d.epsilon),
        )?,
        tokens_per_queued_request: weight(
            "queue-cost-tokens",
            (args.queue_cost_tokens.or(file.queue_cost_tokens))
                .unwrap_or(d.tokens_per_queued_request),
        )?,
        max_num_seqs: (args.max_num_seqs.or(file.max_num_seqs))
            .unwrap_or(d.max_num_seqs)
            .max(1),
        tokens_per_running_request: weight(
            "batch-cost-tokens",
            (args.batch_cost_tokens.or(file.batch_cost_tokens))
                .unwrap_or(d.tokens_per_running_request),
        )?,
        uncached_weight: weight(
            "uncached-weight",
            (args.uncached_weight.or(file.uncached_weight)).unwrap_or(d.uncached_weight),
        )?,
        cpu_tier_weight: share(
            "tier-weight-cpu",
            (args.tier_weight_cpu.or(file.tier_weight_cpu)).unwrap_or(d.cpu_tier_weight),
        )?,
        disk_tier_weight: share(
            "tier-weight-disk",
            (args.tier_weight_disk.or(file.tier_weight_disk)).unwrap_or(d.disk_tier_weight),
        )?,
        ..d
    })
}

/// A tier's weight: a routing weight of at most 1 (a token cached on a
/// slower tier is never worth more than one on the GPU).
fn share(flag: &str, v: f64) -> anyhow::Result<f64> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        bail!("--{flag} must be a finite number from 0 to 1; got {v}")
    }
}

/// A routing weight: a finite number, zero or more (the routing script
/// compares costs made of them; NaN would compare false everywhere).
fn weight(flag: &str, v: f64) -> anyhow::Result<f64> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        bail!("--{flag} must be a finite number, zero or more; got {v}")
    }
}
