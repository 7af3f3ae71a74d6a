//! The changes to a [`PrefixCache`](super::PrefixCache)'s set of cached
//! hashes, in the shape of vLLM's KV events (`BlockStored`, `BlockRemoved`,
//! `AllBlocksCleared`), and [`CacheReplay`], which rebuilds that set from
//! them the way a subscriber (the router) does.

use std::collections::HashSet;

use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;

/// One change to the set of cached block hashes. Replaying every event in
/// order from an empty set yields exactly the cache's current set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheEvent {
    /// Blocks became cached (vLLM's `BlockStored`): consecutive blocks of
    /// one request's chain, in chain order.
    Stored {
        /// The new hashes, parent first.
        hashes: Vec<BlockHash>,
        /// The hash of the chain block just before `hashes[0]`, or `None`
        /// when `hashes[0]` is the prompt's first block. It may be held by
        /// another request's block, or no longer be cached at all.
        parent: Option<BlockHash>,
        /// Tokens per block, as vLLM reports it.
        block_size: usize,
        /// The subset of `hashes` the fleet's shared index holds (anchors
        /// and the run's last block: `protocol::index`, the rule the
        /// reporter applies to vLLM's events), pushed to it with their
        /// families.
        indexed: Vec<FamilyBlock>,
    },
    /// Cached blocks were evicted to make room (vLLM's `BlockRemoved`).
    Removed {
        /// The hashes that are no longer cached.
        hashes: Vec<BlockHash>,
        /// The subset of `hashes` that was indexed.
        indexed: Vec<FamilyBlock>,
    },
    /// Every cached hash was dropped (vLLM's `AllBlocksCleared`, sent on
    /// `reset_prefix_cache`).
    Cleared,
}

/// Which tier of a worker's KV cache an event is about, labelled as vLLM
/// labels it in KV events' `medium` (`GPULoadStoreSpec.medium()`,
/// `CPULoadStoreSpec.medium()` in `vllm/v1/kv_offload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Medium {
    /// The engine's own block pool.
    #[default]
    Gpu,
    /// The CPU offload tier (`--cpu-blocks`).
    Cpu,
}

impl Medium {
    /// `"GPU"` or `"CPU"`, as vLLM writes `medium`.
    pub fn as_str(self) -> &'static str {
        match self {
            Medium::Gpu => "GPU",
            Medium::Cpu => "CPU",
        }
    }
}

/// A [`CacheEvent`] and the tier it happened on. The tiers are exclusive
/// (a hash is cached on at most one), so the events of all tiers replay to
/// the worker's whole cached set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierEvent {
    /// Where.
    pub medium: Medium,
    /// What.
    pub event: CacheEvent,
}

/// An event that does not apply to the replayed set: a hash stored twice or
/// removed while absent. Seeing one means the event stream and the cache
/// disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// `Stored` named a hash that was already in the set.
    #[error("hash {0} stored while already cached")]
    AlreadyStored(BlockHash),
    /// `Removed` named a hash that was not in the set.
    #[error("hash {0} removed while not cached")]
    NotStored(BlockHash),
}

/// The set of cached hashes as seen by an event subscriber: starts empty and
/// applies events strictly, per medium (a block moved to the CPU tier is
/// stored there before it leaves the GPU). Used to audit the cache's event
/// stream, and usable by anything that consumes [`CacheEvent`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheReplay {
    held: HashSet<(Medium, BlockHash)>,
}

impl CacheReplay {
    /// An empty replay, as a subscriber starts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one event of the GPU tier (see [`apply_on`](Self::apply_on)).
    pub fn apply(&mut self, event: &CacheEvent) -> Result<(), ReplayError> {
        self.apply_on(Medium::Gpu, event)
    }

    /// Applies one event of `medium`. On an inconsistent event the set is
    /// still updated as far as possible (a stored hash is present, a
    /// removed one absent) and the first inconsistency is returned.
    /// `Cleared` empties every medium.
    pub fn apply_on(&mut self, medium: Medium, event: &CacheEvent) -> Result<(), ReplayError> {
        let mut first_error = None;
        match event {
            CacheEvent::Stored { hashes, .. } => {
                for &h in hashes {
                    if !self.held.insert((medium, h)) && first_error.is_none() {
                        first_error = Some(ReplayError::AlreadyStored(h));
                    }
                }
            }
            CacheEvent::Removed { hashes, .. } => {
                for &h in hashes {
                    if !self.held.remove(&(medium, h)) && first_error.is_none() {
                        first_error = Some(ReplayError::NotStored(h));
                    }
                }
            }
            CacheEvent::Cleared => self.held.clear(),
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Whether `hash` is in the replayed set, on any medium.
    pub fn contains(&self, hash: BlockHash) -> bool {
        self.held.iter().any(|&(_, h)| h == hash)
    }

    /// Number of hashes in the replayed set (a hash on two media once).
    pub fn len(&self) -> usize {
        self.sorted().len()
    }

    /// Whether the replayed set is empty.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The replayed set, sorted, whatever the medium (comparable with
    /// [`PrefixCache::cached_hashes`](super::PrefixCache::cached_hashes)).
    pub fn sorted(&self) -> Vec<BlockHash> {
        let mut v: Vec<BlockHash> = self.held.iter().map(|&(_, h)| h).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_applies_strictly() {
        let mut r = CacheReplay::new();
        let stored = CacheEvent::Stored {
            hashes: vec![BlockHash(1), BlockHash(2)],
            parent: None,
            block_size: 16,
            indexed: vec![FamilyBlock::unplaced(BlockHash(2))],
        };
        r.apply(&stored).unwrap();
        assert_eq!(r.sorted(), vec![BlockHash(1), BlockHash(2)]);
        assert_eq!(
            r.apply(&stored),
            Err(ReplayError::AlreadyStored(BlockHash(1)))
        );
        let removed = CacheEvent::Removed {
            hashes: vec![BlockHash(2), BlockHash(3)],
            indexed: vec![FamilyBlock::unplaced(BlockHash(2))],
        };
        assert_eq!(r.apply(&removed), Err(ReplayError::NotStored(BlockHash(3))));
        assert!(r.contains(BlockHash(1)) && !r.contains(BlockHash(2)));
        r.apply(&CacheEvent::Cleared).unwrap();
        assert!(r.is_empty());
        assert_eq!(r.len(), 0);
    }
}
