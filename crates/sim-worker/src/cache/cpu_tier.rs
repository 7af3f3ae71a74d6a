//! [`CpuTier`]: the CPU offload tier behind the GPU pool (`--cpu-blocks`),
//! and how blocks move between the tiers.
//!
//! vLLM's offloading connector keeps KV blocks in host memory so that a
//! prefix evicted from the GPU can be loaded back over PCIe instead of
//! being recomputed. The model here: a block the GPU pool evicts moves to
//! the CPU tier (its own LRU: a full tier evicts its least recently
//! stored block); a request whose chain continues on the CPU tier takes
//! those blocks back (they are loaded, not computed) and they are cached
//! on the GPU again when its prefill completes. The tiers are exclusive:
//! a hash is cached on at most one, so replaying the events of both, by
//! medium, gives the worker's whole cached set (`CacheReplay`).
//!
//! Events, labelled as vLLM labels them (`"GPU"`, `"CPU"`:
//! `GPULoadStoreSpec.medium()` / `CPULoadStoreSpec.medium()` in
//! `vllm/v1/kv_offload`): a move is `BlockStored` on the CPU (no parent,
//! no tokens) then `BlockRemoved` on the GPU, the order vLLM reports an
//! offloaded block in (its copy is stored while the GPU still holds the
//! block), so a consumer tracking media sees it held throughout; a CPU
//! eviction or a load back is
//! `BlockRemoved` on the CPU. A move keeps a block in the fleet's index (the
//! worker still holds it) on another tier: its CPU store carries the moved
//! indexed blocks on the CPU tier, pushed as stored there; a block leaving
//! the CPU tier is reported as evicted, and one cached on the GPU again is
//! indexed anew (on the GPU) by its commit.

use std::collections::{BTreeMap, HashMap, HashSet};

use protocol::Tier;
use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;

use super::PrefixCache;
use crate::events::{CacheEvent, Medium};

/// What the CPU tier keeps of a block: its place in the fleet's index.
#[derive(Debug, Clone, Copy)]
pub(super) struct CpuEntry {
    pub(super) indexed: bool,
    pub(super) family: Option<BlockHash>,
    stamp: u64,
}

impl CpuEntry {
    /// The block as the fleet's index holds it: on the CPU tier.
    fn as_indexed(&self, hash: BlockHash) -> Option<FamilyBlock> {
        self.indexed
            .then_some(FamilyBlock::new(hash, self.family).on(Tier::Cpu))
    }
}

/// The CPU tier's blocks in LRU order; see the module docs.
#[derive(Debug, Clone, Default)]
pub(super) struct CpuTier {
    capacity: usize,
    entries: HashMap<BlockHash, CpuEntry>,
    /// Stamp → hash, oldest first: the eviction order.
    order: BTreeMap<u64, BlockHash>,
    next_stamp: u64,
}

impl CpuTier {
    pub(super) fn new(capacity: usize) -> Self {
        CpuTier {
            capacity,
            ..CpuTier::default()
        }
    }

    pub(super) fn is_on(&self) -> bool {
        self.capacity > 0
    }

    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn contains(&self, hash: &BlockHash) -> bool {
        self.entries.contains_key(hash)
    }

    pub(super) fn hashes(&self) -> impl Iterator<Item = BlockHash> + '_ {
        self.entries.keys().copied()
    }

    pub(super) fn indexed(&self) -> impl Iterator<Item = FamilyBlock> + '_ {
        self.entries.iter().filter_map(|(&h, e)| e.as_indexed(h))
    }

    /// Stores `hash` as the most recent block; returns the block it
    /// evicted to make room, if the tier was full.
    fn insert(
        &mut self,
        hash: BlockHash,
        indexed: bool,
        family: Option<BlockHash>,
    ) -> Option<(BlockHash, CpuEntry)> {
        let evicted = if self.entries.len() >= self.capacity {
            self.order
                .pop_first()
                .and_then(|(_, old)| self.entries.remove(&old).map(|e| (old, e)))
        } else {
            None
        };
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.order.insert(stamp, hash);
        self.entries.insert(
            hash,
            CpuEntry {
                indexed,
                family,
                stamp,
            },
        );
        evicted
    }

    /// Removes `hash` (loaded back to the GPU), if held.
    pub(super) fn take(&mut self, hash: &BlockHash) -> Option<CpuEntry> {
        let entry = self.entries.remove(hash)?;
        self.order.remove(&entry.stamp);
        Some(entry)
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
    }

    /// Whether the LRU order and the entries agree, within capacity.
    pub(super) fn is_consistent(&self) -> bool {
        self.entries.len() <= self.capacity
            && self.order.len() == self.entries.len()
            && self
                .order
                .iter()
                .all(|(s, h)| self.entries.get(h).is_some_and(|e| e.stamp == *s))
    }
}

/// A block the GPU pool evicted: its hash and place in the fleet's index.
pub(super) struct GpuEvicted {
    pub(super) hash: BlockHash,
    pub(super) indexed: Option<FamilyBlock>,
}

impl PrefixCache {
    /// Takes `hashes` off the CPU tier (they are loaded back to the GPU),
    /// emitting their `BlockRemoved` on the CPU.
    pub(super) fn take_from_cpu(&mut self, hashes: &[BlockHash]) {
        let mut taken = Vec::new();
        let mut indexed = Vec::new();
        for h in hashes {
            if let Some(e) = self.cpu.take(h) {
                taken.push(*h);
                indexed.extend(e.as_indexed(*h));
            }
        }
        if !taken.is_empty() {
            self.emit_on(
                Medium::Cpu,
                CacheEvent::Removed {
                    hashes: taken,
                    indexed,
                },
            );
        }
    }

    /// Reports blocks the GPU pool evicted: gone, without a CPU tier; else
    /// moved to it (see the module docs for the events).
    pub(super) fn spill(&mut self, evicted: Vec<GpuEvicted>) {
        let hashes: Vec<BlockHash> = evicted.iter().map(|e| e.hash).collect();
        if !self.cpu.is_on() {
            let indexed = evicted.into_iter().filter_map(|e| e.indexed).collect();
            self.emit_on(Medium::Gpu, CacheEvent::Removed { hashes, indexed });
            return;
        }
        let mut moved: HashSet<BlockHash> = HashSet::with_capacity(evicted.len());
        let mut moved_indexed: HashMap<BlockHash, FamilyBlock> = HashMap::new();
        let mut lost_indexed = Vec::new();
        let mut cpu_removed = Vec::new();
        let mut cpu_removed_indexed = Vec::new();
        for e in &evicted {
            let (indexed, family) = match e.indexed {
                Some(b) => (true, b.family),
                None => (false, None),
            };
            moved.insert(e.hash);
            if let Some(b) = e.indexed {
                moved_indexed.insert(e.hash, b.on(Tier::Cpu));
            }
            let Some((old, entry)) = self.cpu.insert(e.hash, indexed, family) else {
                continue;
            };
            self.cpu_evictions += 1;
            if moved.remove(&old) {
                // Moved and evicted in one batch: it simply left the GPU.
                lost_indexed.extend(entry.as_indexed(old));
            } else {
                cpu_removed.push(old);
                cpu_removed_indexed.extend(entry.as_indexed(old));
            }
        }
        self.offloaded += moved.len() as u64;
        if !cpu_removed.is_empty() {
            self.emit_on(
                Medium::Cpu,
                CacheEvent::Removed {
                    hashes: cpu_removed,
                    indexed: cpu_removed_indexed,
                },
            );
        }
        let stored: Vec<BlockHash> = hashes
            .iter()
            .filter(|h| moved.contains(h))
            .copied()
            .collect();
        if !stored.is_empty() {
            // vLLM's offloading connector sends no parent and no tokens,
            // and stores the copy while the GPU still holds the block: a
            // reporter that tracks media sees it held throughout.
            let indexed = stored
                .iter()
                .filter_map(|h| moved_indexed.get(h).copied())
                .collect();
            self.emit_on(
                Medium::Cpu,
                CacheEvent::Stored {
                    hashes: stored,
                    parent: None,
                    block_size: self.block_size,
                    indexed,
                },
            );
        }
        self.emit_on(
            Medium::Gpu,
            CacheEvent::Removed {
                hashes,
                indexed: lost_indexed,
            },
        );
    }
}
