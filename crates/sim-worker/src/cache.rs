//! [`PrefixCache`]: a model of vLLM v1's KV block pool with prefix caching
//! (`BlockPool` + `FreeKVCacheBlockQueue` + the hash-to-block map).
//!
//! The pool has a fixed number of blocks. A block is *pinned* while some
//! request holds it (ref count > 0) and *free* otherwise; every free block
//! sits in the free queue, whose head is evicted first (LRU). A free block
//! may still be *cached* (carry a hash) until it is taken for new data.
//! Like vLLM:
//!
//! * [`lookup`](PrefixCache::lookup) matches the longest cached prefix of a
//!   chain, stopping at the first miss;
//! * [`allocate`](PrefixCache::allocate) reuses the matched blocks (ref +1,
//!   unlinked from the free queue), then pops new ones from the head of the
//!   free queue, evicting the hashes they held; all or nothing;
//! * [`commit`](PrefixCache::commit) registers the request's full prompt
//!   blocks once computed: the engine calls it when the prefill completes,
//!   so a concurrent request cannot hit blocks that are still being
//!   computed. A hash already cached by another block (two requests computed
//!   the same prefix concurrently) is not registered twice: that block stays
//!   anonymous, so every hash names exactly one block;
//! * [`free`](PrefixCache::free) releases a request's blocks in reverse
//!   order onto the tail of the free queue, so that a prompt's tail is
//!   evicted before its head; blocks still held by others stay pinned.
//!
//! Every change to the set of cached hashes is queued as a [`CacheEvent`].
//! All operations cost O(blocks touched), never O(capacity), except the
//! snapshots and [`check_invariants`](PrefixCache::check_invariants).
//!
//! With a CPU tier ([`set_cpu_blocks`](PrefixCache::set_cpu_blocks);
//! `cpu_tier` has the model) evicted blocks move there, and `allocate`
//! takes a chain's continuation on it back as CPU hits. Without one (the
//! default) nothing of it exists and every event is the GPU pool's.

use std::collections::{HashMap, HashSet};

mod cpu_tier;
mod free_queue;
mod indexing;
mod invariants;
mod queries;
mod types;

use cpu_tier::{CpuTier, GpuEvicted};
use free_queue::FreeQueue;
pub use types::{Allocation, CacheError, CacheStats};

use super::RequestId;
use super::events::{CacheEvent, CacheReplay, Medium, ReplayError, TierEvent};
use protocol::family::{DEFAULT_FAMILY_BLOCKS, FamilyBlock, chain_family};
use protocol::hashing::BlockHash;
use protocol::index::branch_point;

#[derive(Debug, Clone, Copy, Default)]
struct Block {
    ref_cnt: u32,
    hash: Option<BlockHash>,
    /// Whether the fleet's index holds `hash` (`protocol::index`).
    indexed: bool,
    /// The prefix family of `hash` (`protocol::family`).
    family: Option<BlockHash>,
}

#[derive(Debug, Clone)]
struct Held {
    blocks: Vec<usize>,
    hashes: Vec<BlockHash>,
    committed: bool,
}

/// vLLM v1's prefix-cached KV block pool. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct PrefixCache {
    block_size: usize,
    blocks: Vec<Block>,
    free: FreeQueue,
    cached: HashMap<BlockHash, usize>,
    requests: HashMap<RequestId, Held>,
    events: Vec<TierEvent>,
    record_events: bool,
    evictions: u64,
    cpu: CpuTier,
    /// Blocks moved to the CPU tier, evicted from it, loaded back from it.
    offloaded: u64,
    cpu_evictions: u64,
    cpu_hit_blocks: u64,
    audit: Option<CacheReplay>,
    audit_error: Option<ReplayError>,
    family_blocks: usize,
}

impl PrefixCache {
    /// A pool of `capacity` empty blocks of `block_size` tokens, all free.
    pub fn new(capacity: usize, block_size: usize) -> Result<Self, CacheError> {
        if capacity == 0 {
            return Err(CacheError::InvalidConfig(
                "capacity must be at least 1 block",
            ));
        }
        if block_size == 0 {
            return Err(CacheError::InvalidConfig("block size must be at least 1"));
        }
        Ok(PrefixCache {
            block_size,
            blocks: vec![Block::default(); capacity],
            free: FreeQueue::full(capacity),
            cached: HashMap::new(),
            requests: HashMap::new(),
            events: Vec::new(),
            record_events: true,
            evictions: 0,
            cpu: CpuTier::default(),
            offloaded: 0,
            cpu_evictions: 0,
            cpu_hit_blocks: 0,
            audit: None,
            audit_error: None,
            family_blocks: DEFAULT_FAMILY_BLOCKS,
        })
    }

    /// Computes blocks' families over `family_blocks` blocks (the fleet's
    /// `--family-blocks`) instead of the default.
    pub fn set_family_blocks(&mut self, family_blocks: usize) {
        self.family_blocks = family_blocks.max(1);
    }

    /// Gives the pool a CPU tier of `blocks` blocks (0: none, the default).
    /// Call before the first allocation: whatever the tier held is dropped.
    pub fn set_cpu_blocks(&mut self, blocks: usize) {
        self.cpu = CpuTier::new(blocks);
    }

    /// Also replays every event into a private [`CacheReplay`], so that
    /// [`check_invariants`](Self::check_invariants) can compare it with the
    /// cached set even after the caller drained the events. For tests: it
    /// doubles the memory spent on hashes.
    pub fn with_audit(mut self) -> Self {
        let mut replay = CacheReplay::new();
        let current = CacheEvent::Stored {
            hashes: self.cached_hashes(),
            parent: None,
            block_size: self.block_size,
            indexed: self.indexed_hashes(),
        };
        self.audit_error = replay.apply(&current).err();
        self.audit = Some(replay);
        self
    }

    /// Whether events are queued for [`drain_events`](Self::drain_events)
    /// (on by default). Turn off when nobody consumes them, so that the
    /// queue does not grow without bound.
    pub fn set_record_events(&mut self, on: bool) {
        self.record_events = on;
    }

    /// Blocks in the pool.
    pub fn capacity(&self) -> usize {
        self.blocks.len()
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Gives request `id` `num_blocks` blocks: its cached prefix of `hashes`
    /// (the hashes of its full prompt blocks, in order) reused, the rest new
    /// (evicting what they cached); the blocks after the GPU prefix that the
    /// CPU tier holds are taken off it, to be loaded. Fails without side
    /// effects if the pool cannot supply them now
    /// ([`CacheError::OutOfBlocks`]) or ever.
    pub fn allocate(
        &mut self,
        id: RequestId,
        hashes: &[BlockHash],
        num_blocks: usize,
    ) -> Result<Allocation, CacheError> {
        if self.requests.contains_key(&id) {
            return Err(CacheError::DuplicateRequest(id));
        }
        if num_blocks < hashes.len() {
            return Err(CacheError::TooFewBlocks {
                hashes: hashes.len(),
                num_blocks,
            });
        }
        if num_blocks > self.capacity() {
            return Err(CacheError::TooLarge {
                num_blocks,
                capacity: self.capacity(),
            });
        }
        let mut seen = HashSet::with_capacity(hashes.len());
        if let Some(&h) = hashes.iter().find(|h| !seen.insert(**h)) {
            return Err(CacheError::RepeatedHash(h));
        }
        let mut held: Vec<usize> = hashes
            .iter()
            .map_while(|h| self.cached.get(h).copied())
            .collect();
        let hit_blocks = held.len();
        // Distinct hashes map to distinct blocks, so this counts each once.
        let revived = held
            .iter()
            .filter(|&&b| self.blocks[b].ref_cnt == 0)
            .count();
        let needed = num_blocks - hit_blocks;
        let available = self.free.len() - revived;
        if needed > available {
            return Err(CacheError::OutOfBlocks { needed, available });
        }
        let cpu_hit_blocks = hashes[hit_blocks..]
            .iter()
            .take_while(|h| self.cpu.contains(h))
            .count();
        // Before anything spills: the spill must not evict them.
        self.take_from_cpu(&hashes[hit_blocks..hit_blocks + cpu_hit_blocks]);
        self.cpu_hit_blocks += cpu_hit_blocks as u64;
        for &b in &held {
            if self.blocks[b].ref_cnt == 0 {
                self.free.remove(b);
            }
            self.blocks[b].ref_cnt += 1;
        }
        let mut evicted = Vec::new();
        while held.len() < num_blocks {
            let Some(b) = self.free.pop_front() else {
                break;
            };
            let block = &mut self.blocks[b];
            if let Some(hash) = block.hash.take() {
                self.cached.remove(&hash);
                let indexed = std::mem::take(&mut block.indexed)
                    .then_some(FamilyBlock::new(hash, block.family));
                evicted.push(GpuEvicted { hash, indexed });
            }
            block.ref_cnt = 1;
            held.push(b);
        }
        debug_assert_eq!(held.len(), num_blocks, "free count was checked");
        self.evictions += evicted.len() as u64;
        if !evicted.is_empty() {
            self.spill(evicted);
        }
        self.requests.insert(
            id,
            Held {
                blocks: held,
                hashes: hashes.to_vec(),
                committed: false,
            },
        );
        Ok(Allocation {
            hit_blocks,
            new_blocks: needed,
            cpu_hit_blocks,
        })
    }

    /// Registers request `id`'s computed full prompt blocks as cached (its
    /// prefill completed), emitting one `Stored` event per run of newly
    /// cached consecutive blocks. Returns how many became cached; a second
    /// call does nothing.
    pub fn commit(&mut self, id: RequestId) -> Result<usize, CacheError> {
        let held = self
            .requests
            .get(&id)
            .ok_or(CacheError::UnknownRequest(id))?;
        if held.committed {
            return Ok(0);
        }
        if self.cpu.is_on() {
            // Blocks the CPU tier received after this request allocated
            // return to the GPU: the tiers stay exclusive.
            let on_cpu: Vec<BlockHash> = held
                .hashes
                .iter()
                .filter(|h| self.cpu.contains(h) && !self.cached.contains_key(h))
                .copied()
                .collect();
            self.take_from_cpu(&on_cpu);
        }
        let Some(held) = self.requests.get_mut(&id) else {
            return Err(CacheError::UnknownRequest(id));
        };
        held.committed = true;
        let mut events = Vec::new();
        // (block, hash, position in the chain) of the current run.
        let mut run: Vec<(usize, BlockHash, usize)> = Vec::new();
        let mut parent = None;
        let mut stored = 0;
        let last = held.hashes.len().saturating_sub(1);
        let chain_fam = chain_family(&held.hashes, self.family_blocks);
        for (i, (&b, &h)) in held.blocks.iter().zip(&held.hashes).enumerate() {
            let block = &mut self.blocks[b];
            let fresh = block.hash.is_none() && !self.cached.contains_key(&h);
            if fresh {
                block.hash = Some(h);
                self.cached.insert(h, b);
                if run.is_empty() {
                    parent = i.checked_sub(1).map(|p| held.hashes[p]);
                }
                run.push((b, h, i));
                stored += 1;
            }
            if (!fresh || i == last) && !run.is_empty() {
                // The block the run grew from, if a branch point: the cached
                // block of that hash (this request's own block there may be
                // a duplicate another request cached first).
                let branch = branch_point(run[0].2, run.len())
                    .and_then(|p| self.cached.get(&held.hashes[p]).copied());
                let indexed = indexing::index_run(
                    &mut self.blocks,
                    self.family_blocks,
                    branch,
                    &run,
                    chain_fam,
                );
                events.push(CacheEvent::Stored {
                    hashes: run.drain(..).map(|(_, h, _)| h).collect(),
                    parent,
                    block_size: self.block_size,
                    indexed,
                });
            }
        }
        for event in events {
            self.emit(event);
        }
        Ok(stored)
    }

    /// Releases request `id`'s blocks, tail first, onto the tail of the free
    /// queue; blocks still held by another request stay pinned. Cached
    /// blocks stay cached until evicted.
    pub fn free(&mut self, id: RequestId) -> Result<(), CacheError> {
        let held = self
            .requests
            .remove(&id)
            .ok_or(CacheError::UnknownRequest(id))?;
        for &b in held.blocks.iter().rev() {
            let block = &mut self.blocks[b];
            block.ref_cnt = block.ref_cnt.saturating_sub(1);
            if block.ref_cnt == 0 {
                self.free.push_back(b);
            }
        }
        Ok(())
    }

    /// Whether request `id` holds blocks.
    pub fn holds(&self, id: RequestId) -> bool {
        self.requests.contains_key(&id)
    }

    /// Forgets every cached hash and emits `Cleared` (vLLM's
    /// `reset_prefix_cache` → `AllBlocksCleared`). Pinned blocks stay with
    /// their requests, untouched, but lose their hash too, so that `Cleared`
    /// means exactly "nothing is cached" to a subscriber (vLLM instead
    /// refuses to reset while blocks are in use). Requests whose prefill
    /// has not completed still register their blocks when it does.
    pub fn reset(&mut self) {
        for (_, b) in self.cached.drain() {
            self.blocks[b].hash = None;
            self.blocks[b].indexed = false;
        }
        self.cpu.clear();
        self.emit(CacheEvent::Cleared);
    }

    fn emit(&mut self, event: CacheEvent) {
        self.emit_on(Medium::Gpu, event);
    }

    fn emit_on(&mut self, medium: Medium, event: CacheEvent) {
        if let Some(replay) = &mut self.audit
            && let Err(err) = replay.apply_on(medium, &event)
        {
            self.audit_error.get_or_insert(err);
        }
        if self.record_events {
            self.events.push(TierEvent { medium, event });
        }
    }
}
