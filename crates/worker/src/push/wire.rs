//! The push API's forms of a worker's blocks: hashes with their families
//! and tiers, and the digests a sync check sends (of the whole set, or per
//! shard; each block counted with its tier).

use std::borrow::Cow;

use protocol::Tier;
use protocol::family::{FamilyBlock, block_shards, split_families};
use protocol::hashing::BlockHash;
use protocol::index::{digest_bucket, digests_hex, parse_bucket_name, tiered_digests};

/// A body's `families` field.
pub(super) type WireFamilies = Option<Cow<'static, [Option<BlockHash>]>>;

/// A body's `tiers` field: None when every block is on the GPU (what a
/// fleet that predates tiers assumes).
pub(super) fn wire_tiers(blocks: &[FamilyBlock]) -> Option<Cow<'static, [Tier]>> {
    blocks
        .iter()
        .any(|b| b.tier != Tier::Gpu)
        .then(|| Cow::Owned(blocks.iter().map(|b| b.tier).collect()))
}

/// The push API's form of `blocks`: their hashes, and their families
/// unless none is known (then the fleet places every block everywhere).
pub(super) fn wire_blocks(blocks: &[FamilyBlock]) -> (Vec<BlockHash>, WireFamilies) {
    let (hashes, families) = split_families(blocks);
    let known = families.iter().any(Option::is_some);
    (hashes, known.then_some(Cow::Owned(families)))
}

/// A sync check's digests of `snapshot`: of the whole set when the fleet
/// has one shard, else one string per shard of the blocks it holds.
pub(super) fn check_digests(
    snapshot: &[FamilyBlock],
    shards: usize,
) -> (String, Option<Vec<String>>) {
    let term = |b: &FamilyBlock| (b.hash, b.tier);
    if shards <= 1 {
        return (
            digests_hex(&tiered_digests(snapshot.iter().map(term))),
            None,
        );
    }
    let mut sets: Vec<Vec<(BlockHash, Tier)>> = vec![Vec::new(); shards];
    for b in snapshot {
        for s in block_shards(b.family, shards) {
            sets[s].push(term(b));
        }
    }
    let per_shard = sets
        .into_iter()
        .map(|set| digests_hex(&tiered_digests(set)))
        .collect();
    (String::new(), Some(per_shard))
}

/// The blocks of `snapshot` in the digest `buckets` a sync check listed
/// (`protocol::index::parse_bucket_name`). Unparsable entries select
/// nothing.
pub(super) fn in_buckets(
    snapshot: &[FamilyBlock],
    buckets: &[String],
    shards: usize,
) -> Vec<FamilyBlock> {
    let shards = shards.max(1);
    let mut wanted = vec![[false; 256]; shards];
    for (shard, bucket) in buckets.iter().filter_map(|b| parse_bucket_name(b)) {
        if let Some(w) = wanted.get_mut(shard) {
            w[bucket] = true;
        }
    }
    snapshot
        .iter()
        .filter(|b| {
            let bucket = digest_bucket(b.hash);
            block_shards(b.family, shards).any(|s| wanted[s][bucket])
        })
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_blocks_count_in_every_shard() {
        let blocks = [
            FamilyBlock::new(BlockHash(0x10), None),
            FamilyBlock::new(BlockHash(0x20), Some(BlockHash(1))),
        ];
        let (whole, none) = check_digests(&blocks, 1);
        assert!(none.is_none() && whole.len() == 4096);
        let (empty, per) = check_digests(&blocks, 2);
        let per = per.unwrap();
        assert!(empty.is_empty() && per.len() == 2);
        // Shard 1 (family 1 % 2) has both blocks, shard 0 the head only.
        let gpu =
            |hs: &[u64]| digests_hex(&protocol::index::digests(hs.iter().map(|h| BlockHash(*h))));
        assert_eq!(per[0], gpu(&[0x10]));
        assert_eq!(per[1], gpu(&[0x10, 0x20]));
        // A block off the GPU counts with its tier.
        let cpu = [blocks[0].on(Tier::Cpu)];
        let (whole, _) = check_digests(&cpu, 1);
        assert_ne!(whole, gpu(&[0x10]));
        assert_eq!(wire_tiers(&cpu).unwrap().as_ref(), &[Tier::Cpu]);
        assert!(wire_tiers(&blocks).is_none());
        let (hashes, families) = wire_blocks(&blocks);
        assert_eq!(hashes, [BlockHash(0x10), BlockHash(0x20)]);
        assert_eq!(families.unwrap().as_ref(), &[None, Some(BlockHash(1))]);
    }

    #[test]
    fn a_repair_sends_the_blocks_of_the_listed_buckets() {
        let block = |hash: u64, family: Option<u64>| {
            FamilyBlock::new(BlockHash(hash), family.map(BlockHash))
        };
        let snapshot = [
            block(0x3a00_0000_0000_0001, None),
            block(0x3a00_0000_0000_0002, Some(7)),
            block(0x4400_0000_0000_0003, Some(7)),
        ];
        let one = in_buckets(&snapshot, &["3a".into()], 1);
        assert_eq!(one, snapshot[..2].to_vec());
        let shard = block_shards(Some(BlockHash(7)), 3).next().unwrap();
        let other = (shard + 1) % 3;
        // A head block (no family) is in every shard; a family's, in one.
        let listed = in_buckets(&snapshot, &[format!("{other}:3a")], 3);
        assert_eq!(listed, snapshot[..1].to_vec());
        let listed = in_buckets(&snapshot, &[format!("{shard}:3a"), "x:44".into()], 3);
        assert_eq!(listed, snapshot[..2].to_vec());
    }
}
