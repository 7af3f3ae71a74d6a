//! Prefix families: how one model's index is split over Valkey shards.
//!
//! A route and its claim must stay one atomic call on one shard, and that
//! call must see every block a worker could match. A block's **family** is
//! the hash of the block at position `family_blocks - 1` of its chain, and
//! a family's blocks live on the family's shard. Because a block's hash
//! chains every block before it, a prompt that shares a prefix of at least
//! `family_blocks` blocks with a worker's cache has that worker's family,
//! so it finds the match on its own family's shard. Blocks before that
//! position (the **head**, none when `family_blocks` is 1) belong to every
//! family, so they are written to every shard.
//!
//! `family_blocks` trades spread for write cost: 1 (the default) writes
//! nothing twice but puts all prompts that begin with the same 16 tokens
//! (a shared system prompt) in one family; a fleet whose prompts share a
//! long head should set it past that head, and pays one write per shard
//! for each new head block. Routers and workers must use the same value:
//! a worker sends it with its heartbeat and a router refuses a mismatch.

use crate::hashing::BlockHash;
use crate::tier::Tier;

/// A block as workers report it: its hash, its family (None for a head
/// block, or when unknown; either way every shard gets it) and the best
/// tier the worker holds it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FamilyBlock {
    /// The block's hash.
    pub hash: BlockHash,
    /// Its family.
    pub family: Option<BlockHash>,
    /// Its best medium.
    pub tier: Tier,
}

impl FamilyBlock {
    /// A block of unknown family (sent to every shard), on the GPU.
    pub fn unplaced(hash: BlockHash) -> Self {
        FamilyBlock::new(hash, None)
    }

    /// A block of `family` on the GPU.
    pub fn new(hash: BlockHash, family: Option<BlockHash>) -> Self {
        FamilyBlock {
            hash,
            family,
            tier: Tier::Gpu,
        }
    }

    /// The same block on `tier`.
    pub fn on(self, tier: Tier) -> Self {
        FamilyBlock { tier, ..self }
    }
}

/// The hashes and the families of `blocks`, as the push API sends them.
pub fn split_families(blocks: &[FamilyBlock]) -> (Vec<BlockHash>, Vec<Option<BlockHash>>) {
    blocks.iter().map(|b| (b.hash, b.family)).unzip()
}

/// Family depth unless configured: a block's family is its chain's first
/// block.
pub const DEFAULT_FAMILY_BLOCKS: usize = 1;

/// The most virtual shards a model may be split into.
pub const MAX_SHARDS: usize = 256;

/// The family of the block at 0-based `position` of its chain, given its
/// own hash and its parent's family (None for a chain's first block or a
/// head parent): None while the block is in the head.
pub fn family_at(
    position: usize,
    own: BlockHash,
    parent_family: Option<BlockHash>,
    family_blocks: usize,
) -> Option<BlockHash> {
    let depth = family_blocks.max(1);
    if position + 1 < depth {
        None
    } else if position + 1 == depth {
        Some(own)
    } else {
        parent_family
    }
}

/// The family of a whole chain (its blocks past the head): None when the
/// chain is shorter than the family depth.
pub fn chain_family(chain: &[BlockHash], family_blocks: usize) -> Option<BlockHash> {
    chain.get(family_blocks.max(1) - 1).copied()
}

/// The shard (of `shards`) a family lives on. Uses the hash's low bits:
/// forward-map buckets and digests use its high ones.
pub fn family_shard(family: BlockHash, shards: usize) -> usize {
    (family.0 % shards.max(1) as u64) as usize
}

/// The shards a block goes to: its family's, or every shard for a head
/// block (None).
pub fn block_shards(
    family: Option<BlockHash>,
    shards: usize,
) -> impl Iterator<Item = usize> + Clone {
    let shards = shards.max(1);
    let (from, to) = match family {
        Some(f) => {
            let s = family_shard(f, shards);
            (s, s + 1)
        }
        None => (0, shards),
    };
    from..to
}

/// The shard that routes a chain: its family's; a chain shorter than the
/// family depth goes by its last block, so that the same short prompt is
/// always serialised on one shard (its blocks are head blocks, on every
/// shard).
pub fn route_shard(chain: &[BlockHash], family_blocks: usize, shards: usize) -> usize {
    match chain_family(chain, family_blocks).or_else(|| chain.last().copied()) {
        Some(h) => family_shard(h, shards),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_the_block_at_the_family_depth() {
        let chain: Vec<BlockHash> = (10..20).map(BlockHash).collect();
        // Depth 1: every block's family is the first block.
        let mut parent = None;
        for (p, &h) in chain.iter().enumerate() {
            parent = family_at(p, h, parent, 1);
            assert_eq!(parent, Some(BlockHash(10)));
        }
        // Depth 3: two head blocks, then the third block's hash.
        let mut parent = None;
        let families: Vec<_> = chain
            .iter()
            .enumerate()
            .map(|(p, &h)| {
                parent = family_at(p, h, parent, 3);
                parent
            })
            .collect();
        assert_eq!(&families[..2], &[None, None]);
        assert!(families[2..].iter().all(|f| *f == Some(BlockHash(12))));
        assert_eq!(chain_family(&chain, 3), Some(BlockHash(12)));
        assert_eq!(chain_family(&chain[..2], 3), None);
        assert_eq!(chain_family(&chain, 0), Some(BlockHash(10)));
    }

    #[test]
    fn head_blocks_go_everywhere_and_others_to_one_shard() {
        assert_eq!(block_shards(None, 4).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(block_shards(Some(BlockHash(7)), 4).collect::<Vec<_>>(), [3]);
        assert_eq!(block_shards(Some(BlockHash(7)), 1).collect::<Vec<_>>(), [0]);
        assert_eq!(block_shards(None, 0).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn a_chain_routes_on_its_family_or_last_block() {
        let chain: Vec<BlockHash> = [5, 6, 9].map(BlockHash).to_vec();
        assert_eq!(route_shard(&chain, 1, 4), 1);
        assert_eq!(route_shard(&chain, 2, 4), 2);
        // Shorter than the depth: the last block.
        assert_eq!(route_shard(&chain, 8, 4), 1);
        assert_eq!(route_shard(&[], 8, 4), 0);
        // Every block of the chain lives on the shard that routes it.
        for depth in 1..5 {
            let s = route_shard(&chain, depth, 3);
            let mut parent = None;
            for (p, &h) in chain.iter().enumerate() {
                parent = family_at(p, h, parent, depth);
                assert!(block_shards(parent, 3).any(|x| x == s), "{depth} {p}");
            }
        }
    }
}
