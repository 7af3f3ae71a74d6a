//! The response cache's flags ([`ResponseCacheArgs`], flattened into
//! `serve`'s), their resolution over the file's keys and the defaults, and
//! what they resolve into ([`ResponseCacheSettings`]).

use std::time::Duration;

use anyhow::bail;

use protocol::parse_duration;

use super::file::file_duration;

/// Largest entry by default: 1 MiB.
const DEFAULT_MAX_ENTRY_BYTES: usize = 1 << 20;
/// Bytes of entries per model by default: 64 MiB.
const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// What the cache keeps, how long and how much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseCacheSettings {
    /// Life of an entry.
    pub ttl: Duration,
    /// Largest entry (its body plus a few bytes per chunk).
    pub max_entry_bytes: usize,
    /// Bytes of entries per model at once (shared by its shards).
    pub max_bytes: u64,
}

/// Flags of `serve` about the response cache (flattened into
/// [`super::ServeArgs`]).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ResponseCacheArgs {
    /// Answer identical deterministic completions (temperature 0 or a
    /// seed) from Valkey for this long after a worker's answer
    /// [default: off].
    #[arg(long, env = "PREFIX_ROUTER_RESPONSE_CACHE_TTL", value_parser = parse_duration)]
    pub response_cache_ttl: Option<Duration>,
    /// Largest response the cache keeps, in bytes [default: 1048576].
    #[arg(long, env = "PREFIX_ROUTER_RESPONSE_CACHE_MAX_ENTRY_BYTES")]
    pub response_cache_max_entry_bytes: Option<usize>,
    /// Bytes of cached responses per model in Valkey at once; past it,
    /// responses are not stored until entries expire [default: 67108864].
    #[arg(long, env = "PREFIX_ROUTER_RESPONSE_CACHE_MAX_BYTES")]
    pub response_cache_max_bytes: Option<u64>,
}

/// The file's response cache keys.
pub(super) struct FileKeys {
    pub(super) ttl: Option<String>,
    pub(super) max_entry_bytes: Option<usize>,
    pub(super) max_bytes: Option<u64>,
}

/// The cache's settings: flags over the file over the defaults; `None`
/// (off) without a TTL.
pub(super) fn resolve(
    args: &ResponseCacheArgs,
    file: FileKeys,
) -> anyhow::Result<Option<ResponseCacheSettings>> {
    let ttl = args
        .response_cache_ttl
        .or(file_duration(file.ttl, "response_cache_ttl")?);
    let max_entry_bytes = args
        .response_cache_max_entry_bytes
        .or(file.max_entry_bytes)
        .unwrap_or(DEFAULT_MAX_ENTRY_BYTES);
    let max_bytes = args
        .response_cache_max_bytes
        .or(file.max_bytes)
        .unwrap_or(DEFAULT_MAX_BYTES);
    if max_entry_bytes == 0 || max_bytes == 0 {
        bail!("--response-cache-max-entry-bytes and --response-cache-max-bytes must be positive");
    }
    // No entry is larger than the whole budget.
    let max_entry_bytes = max_entry_bytes.min(usize::try_from(max_bytes).unwrap_or(usize::MAX));
    let Some(ttl) = ttl else {
        return Ok(None);
    };
    if ttl.is_zero() {
        bail!("--response-cache-ttl must be positive (leave it unset to turn the cache off)");
    }
    Ok(Some(ResponseCacheSettings {
        ttl,
        max_entry_bytes,
        max_bytes,
    }))
}
