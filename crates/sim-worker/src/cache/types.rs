//! The values [`PrefixCache`](super::PrefixCache) reports, and its errors.

use crate::RequestId;
use protocol::hashing::BlockHash;

/// Why a cache operation was refused. Refusals have no side effects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// A capacity or block size of zero.
    #[error("invalid cache configuration: {0}")]
    InvalidConfig(&'static str),
    /// The request already holds blocks.
    #[error("request {0} already holds blocks")]
    DuplicateRequest(RequestId),
    /// The request holds no blocks.
    #[error("request {0} holds no blocks")]
    UnknownRequest(RequestId),
    /// Fewer blocks asked for than the request has full-block hashes.
    #[error("{num_blocks} blocks cannot hold {hashes} hashed blocks")]
    TooFewBlocks {
        /// Hashes given.
        hashes: usize,
        /// Blocks asked for.
        num_blocks: usize,
    },
    /// The same hash twice in one chain (impossible for chained hashes).
    #[error("hash {0} appears twice in one request's chain")]
    RepeatedHash(BlockHash),
    /// More blocks than the whole pool: the request can never run.
    #[error("{num_blocks} blocks exceed the pool's capacity of {capacity}")]
    TooLarge {
        /// Blocks asked for.
        num_blocks: usize,
        /// The pool's capacity.
        capacity: usize,
    },
    /// Not enough free blocks right now; retry after others finish.
    #[error("{needed} new blocks needed, {available} available")]
    OutOfBlocks {
        /// New blocks the request needs beyond its cache hits.
        needed: usize,
        /// Free blocks that could be taken.
        available: usize,
    },
}

/// What [`PrefixCache::allocate`](super::PrefixCache::allocate) did for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Leading hashes served from the cache (blocks reused).
    pub hit_blocks: usize,
    /// Blocks taken from the free queue (CPU hits among them).
    pub new_blocks: usize,
    /// Hashes after the GPU hits taken off the CPU tier, to be loaded
    /// instead of computed (0 without a CPU tier).
    pub cpu_hit_blocks: usize,
}

/// Counters and gauges of the pool, for metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheStats {
    /// Blocks in the pool.
    pub capacity: usize,
    /// Pinned blocks (held by at least one request).
    pub used_blocks: usize,
    /// Blocks in the free queue (cached or not).
    pub free_blocks: usize,
    /// Blocks carrying a hash (pinned or free).
    pub cached_blocks: usize,
    /// Cached hashes evicted to make room, since creation.
    pub evictions: u64,
    /// `used_blocks / capacity`, like vLLM's `vllm:kv_cache_usage_perc`
    /// (a fraction in 0..=1 despite the name).
    pub usage: f64,
    /// Blocks the CPU tier can hold (0: no tier).
    pub cpu_capacity: usize,
    /// Blocks the CPU tier holds.
    pub cpu_cached_blocks: usize,
    /// Blocks moved from the GPU pool to the CPU tier, since creation.
    pub offloaded: u64,
    /// Blocks the CPU tier evicted to make room, since creation.
    pub cpu_evictions: u64,
    /// Blocks requests loaded back from the CPU tier, since creation.
    pub cpu_hit_blocks: u64,
}
