//! [`Held`]: a router hash the engine holds, under one or more engine
//! blocks and on one or more media, and the best tier it is reported on.

use protocol::Tier;
use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;

use super::engine_blocks::BlockDelta;

/// A router hash held by one or more engine blocks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    /// Engine blocks (under any engine hash) holding it.
    pub(super) count: u32,
    /// Whether it was reported to the index.
    pub(super) indexed: bool,
    /// Its prefix family.
    pub(super) family: Option<BlockHash>,
    /// Copies per tier (engine block and medium), by `Tier as usize`.
    copies: [u32; 3],
}

impl Held {
    pub(super) fn new(family: Option<BlockHash>) -> Self {
        Held {
            count: 0,
            indexed: false,
            family,
            copies: [0; 3],
        }
    }

    /// The fastest tier holding a copy (the GPU when none is known).
    pub(super) fn best(&self) -> Tier {
        Tier::ALL
            .into_iter()
            .find(|t| self.copies[*t as usize] > 0)
            .unwrap_or_default()
    }

    /// The block as reported: its family and best tier.
    pub(super) fn block(&self, hash: BlockHash) -> FamilyBlock {
        FamilyBlock::new(hash, self.family).on(self.best())
    }

    /// Counts a copy in (`add`) or out on `tier`; reports the block on its
    /// new best tier when that changed and it is indexed.
    pub(super) fn copy(&mut self, hash: BlockHash, tier: Tier, add: bool, delta: &mut BlockDelta) {
        let before = self.best();
        let n = &mut self.copies[tier as usize];
        *n = if add {
            n.saturating_add(1)
        } else {
            n.saturating_sub(1)
        };
        if self.indexed && self.count > 0 && self.best() != before {
            delta.stored.push(self.block(hash));
        }
    }
}
