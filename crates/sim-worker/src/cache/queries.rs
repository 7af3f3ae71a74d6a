//! What a [`PrefixCache`] answers without changing: lookups, its queued
//! events, snapshots and stats.

use protocol::hashing::BlockHash;

use super::{CacheStats, PrefixCache};
use crate::events::{CacheEvent, TierEvent};

impl PrefixCache {
    /// How many leading hashes of `hashes` the GPU pool caches, stopping at
    /// the first miss. Does not change the LRU order.
    pub fn lookup(&self, hashes: &[BlockHash]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.cached.contains_key(h))
            .count()
    }

    /// Whether the GPU pool caches `hash`.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.cached.contains_key(&hash)
    }

    /// Whether the CPU tier holds `hash`.
    pub fn cpu_contains(&self, hash: BlockHash) -> bool {
        self.cpu.contains(&hash)
    }

    /// The pool's block ids request `id` holds, in its chain's order (vLLM's
    /// block table: what a prefill worker names in `remote_block_ids`).
    pub fn block_ids(&self, id: crate::RequestId) -> Option<&[usize]> {
        self.requests.get(&id).map(|h| h.blocks.as_slice())
    }

    /// Takes the queued events of every tier, oldest first, without their
    /// tier (all of them are the GPU pool's unless a CPU tier is set).
    pub fn drain_events(&mut self) -> Vec<CacheEvent> {
        self.drain_tier_events()
            .into_iter()
            .map(|e| e.event)
            .collect()
    }

    /// Takes the queued events, oldest first, with their tier.
    pub fn drain_tier_events(&mut self) -> Vec<TierEvent> {
        std::mem::take(&mut self.events)
    }

    /// Number of queued events.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// Every cached hash of every tier, sorted: a snapshot for a full sync
    /// (a block on the CPU tier is still the worker's).
    pub fn cached_hashes(&self) -> Vec<BlockHash> {
        let mut v: Vec<BlockHash> = self
            .cached
            .keys()
            .copied()
            .chain(self.cpu.hashes())
            .collect();
        v.sort_unstable();
        v
    }

    /// The hashes the CPU tier holds, sorted.
    pub fn cpu_hashes(&self) -> Vec<BlockHash> {
        let mut v: Vec<BlockHash> = self.cpu.hashes().collect();
        v.sort_unstable();
        v
    }

    /// The cached hashes of free blocks in the order they would be evicted
    /// (first = next). O(capacity); for tests and diagnostics.
    pub fn eviction_order(&self) -> Vec<BlockHash> {
        self.free
            .iter()
            .filter_map(|b| self.blocks[b].hash)
            .collect()
    }

    /// Current counters and gauges.
    pub fn stats(&self) -> CacheStats {
        let capacity = self.capacity();
        let used_blocks = capacity - self.free.len();
        CacheStats {
            capacity,
            used_blocks,
            free_blocks: self.free.len(),
            cached_blocks: self.cached.len(),
            evictions: self.evictions,
            usage: used_blocks as f64 / capacity as f64,
            cpu_capacity: self.cpu.capacity(),
            cpu_cached_blocks: self.cpu.len(),
            offloaded: self.offloaded,
            cpu_evictions: self.cpu_evictions,
            cpu_hit_blocks: self.cpu_hit_blocks,
        }
    }
}
