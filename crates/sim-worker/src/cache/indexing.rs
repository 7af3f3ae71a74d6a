//! Which cached blocks the fleet's index holds (`protocol::index`): of each
//! run of blocks a commit stores, the anchors and the last block, and the
//! block the run grew from when that is a branch point; each with its
//! prefix family. What the sim reports, evicts and snapshots. (A function
//! over the blocks, not a method: `commit` holds the request's entry.)

use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;
use protocol::index::is_indexed_in_run;

use super::{Block, PrefixCache};

/// Marks the indexed blocks of `run` ((block, hash, position in the chain)
/// of newly cached consecutive blocks) and of `branch`, the block it grew
/// from when that is a branch point, and returns them as the `Stored` event
/// reports them. Blocks before the family block have no family.
pub(super) fn index_run(
    blocks: &mut [Block],
    family_blocks: usize,
    branch: Option<usize>,
    run: &[(usize, BlockHash, usize)],
    chain_family: Option<BlockHash>,
) -> Vec<FamilyBlock> {
    let mut indexed = Vec::new();
    if let Some(pb) = branch.map(|b| &mut blocks[b])
        && let (false, Some(hash)) = (pb.indexed, pb.hash)
    {
        pb.indexed = true;
        indexed.push(FamilyBlock::new(hash, pb.family));
    }
    for (offset, &(b, hash, position)) in run.iter().enumerate() {
        let on = is_indexed_in_run(position, offset, run.len());
        let family = (position + 1 >= family_blocks)
            .then_some(chain_family)
            .flatten();
        blocks[b].indexed = on;
        blocks[b].family = family;
        if on {
            indexed.push(FamilyBlock::new(hash, family));
        }
    }
    indexed
}

impl PrefixCache {
    /// Every cached hash the fleet's index holds, with its family and tier,
    /// sorted: what a full sync sends (the CPU tier's too, on that tier).
    pub fn indexed_hashes(&self) -> Vec<FamilyBlock> {
        let mut v: Vec<FamilyBlock> = self
            .cached
            .iter()
            .filter(|&(_, &b)| self.blocks[b].indexed)
            .map(|(&hash, &b)| FamilyBlock::new(hash, self.blocks[b].family))
            .chain(self.cpu.indexed())
            .collect();
        v.sort_unstable();
        v
    }
}
