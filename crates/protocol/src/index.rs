//! Which blocks of a chain the shared index holds.
//!
//! Writing every block of a long prompt to Valkey costs about 7 µs of server
//! time per block and per report (claim, stored, evicted): 20 ms for a
//! 15k-token prompt. The index therefore holds only a chain's **anchors**
//! and **tips**. Anchors are the blocks that end the first 1, 2, 4, 8 and
//! 16 blocks (a short shared prefix, like a system prompt, still counts),
//! then every [`INDEX_STRIDE`]-th block: positions 0, 1, 3, 7, 15, 31, 47, …
//! (0-based). Tips are a routed prompt's last block (claimed by the router)
//! and the last block of each run of two or more blocks a worker stores (a
//! prefill; a decode step's single new block is indexed only when it is an
//! anchor), and **branch points**: the block a prefill of two or more
//! blocks grew from, if not an anchor ([`branch_point`]). Because a
//! block's hash chains all blocks before it, a worker
//! holding an anchor holds the whole prefix up to it, so matching the
//! indexed blocks finds the same worker as matching every block. Routers
//! then probe the blocks between a worker's last held anchor and the next
//! indexed block of the prompt, deepest first, for a tip or branch point
//! it holds. What the router learns is the matched prefix rounded down to
//! an indexed block: exact for a repeated prompt, at anchors, at the end of
//! an earlier prompt and from a prefix's second branch on; otherwise (the
//! first branch inside a stride) short by fewer than [`INDEX_STRIDE`]
//! blocks. The engine's real hit is unaffected.
//!
//! Routers and workers must use the same rule, so it is defined once, here,
//! with the [`digests`] of an indexed set that anti-entropy compares.
//! `crates/state/lua/lib_routing.lua`'s `covered` is [`blocks_covered`] in
//! Lua; `route_script` tests keep them equal.

use crate::hashing::BlockHash;
use crate::tier::Tier;

/// Blocks between two anchors past the dense head: the index holds every
/// 16th block (256 tokens at vLLM's default block size).
pub const INDEX_STRIDE: usize = 16;

/// Anchors among the first [`INDEX_STRIDE`] blocks: positions 0, 1, 3, 7, 15.
const HEAD_ANCHORS: usize = INDEX_STRIDE.trailing_zeros() as usize + 1;

/// Whether the block at 0-based `position` of its chain is an anchor.
pub fn is_anchor(position: usize) -> bool {
    let n = position + 1;
    n.is_multiple_of(INDEX_STRIDE) || (n < INDEX_STRIDE && n.is_power_of_two())
}

/// Whether a worker indexes the block at `position`, the `offset`-th
/// (0-based) of a run of `run_len` blocks it stored together: anchors, and
/// the last block of a run of two or more.
pub fn is_indexed_in_run(position: usize, offset: usize, run_len: usize) -> bool {
    is_anchor(position) || (run_len >= 2 && offset + 1 == run_len)
}

/// The block a prefill branches from, when a worker indexes it: a run of
/// two or more blocks stored at once from 0-based `start` on grew from
/// block `start - 1`, and if that block is not an anchor the worker indexes
/// it too. A shared prefix then ends at an indexed block from the second
/// branch on (a second question on a cached document, a second
/// conversation on a shared system prompt), and routers find it by probing
/// the blocks before the next indexed one ([`GAP_PROBE_BLOCKS`]).
pub fn branch_point(start: usize, run_len: usize) -> Option<usize> {
    (start > 0 && run_len >= 2 && !is_anchor(start - 1)).then(|| start - 1)
}

/// How many leading blocks of a chain a routing call may probe between
/// indexed blocks, for tips and branch points: 16k tokens at vLLM's default
/// block size of 16.
/// Past it a match is credited at its last anchor, as before.
pub const GAP_PROBE_BLOCKS: usize = 1024;

/// The 0-based positions a router matches and claims for a chain of
/// `blocks` blocks: every anchor, then the last block if it is not one.
pub fn indexed_positions(blocks: usize) -> impl Iterator<Item = usize> {
    let head = (0..HEAD_ANCHORS - 1).map(|k| (1usize << k) - 1);
    let anchors = head
        .chain((INDEX_STRIDE - 1..).step_by(INDEX_STRIDE))
        .take_while(move |&p| p < blocks);
    let tip = (blocks > 0 && !is_anchor(blocks - 1)).then(|| blocks - 1);
    anchors.chain(tip)
}

/// Leading blocks of a `blocks`-long chain known held when its first
/// `held` indexed positions are: the block count the `held`-th anchor
/// ends, or the whole chain once its tip is held.
pub fn blocks_covered(held: usize, blocks: usize) -> usize {
    let anchor_end = if held == 0 {
        0
    } else if held <= HEAD_ANCHORS {
        1 << (held - 1)
    } else {
        INDEX_STRIDE.saturating_mul(held - HEAD_ANCHORS + 1)
    };
    anchor_end.min(blocks)
}

/// Digest buckets of a worker's indexed set: by a hash's first byte.
pub const DIGEST_BUCKETS: usize = 256;

/// The digests of a set of hashes, for anti-entropy: per bucket (a hash's
/// first byte) the XOR of its hashes. Equal digests mean, with overwhelming
/// probability, equal sets, so an unchanged worker's periodic sync is one
/// comparison. Duplicates must be removed first (XOR cancels pairs).
pub fn digests(hashes: impl IntoIterator<Item = BlockHash>) -> [u64; DIGEST_BUCKETS] {
    let mut out = [0u64; DIGEST_BUCKETS];
    for h in hashes {
        out[digest_bucket(h)] ^= h.0;
    }
    out
}

/// The digests of a set of blocks with their tiers: as [`digests`], each
/// block counted by its [`digest_term`], so that a block moved to another
/// tier changes its bucket's digest as a block added or removed does. A
/// set all on the GPU has the digests of its hashes.
pub fn tiered_digests(
    blocks: impl IntoIterator<Item = (BlockHash, Tier)>,
) -> [u64; DIGEST_BUCKETS] {
    let mut out = [0u64; DIGEST_BUCKETS];
    for (h, tier) in blocks {
        out[digest_bucket(h)] ^= digest_term(h, tier);
    }
    out
}

/// What a block held on `tier` adds to its bucket's digest: its hash on the
/// GPU; on the CPU (disk) its hash XOR its last seven bytes rotated left by
/// one byte (two bytes), which keeps the first byte, the bucket. Each
/// block's terms differ per tier, so two blocks' tier changes in one bucket
/// cancel only by chance, as two added blocks do. `lua/lib_sync.lua`'s
/// `digest_toggle` computes the same.
pub fn digest_term(h: BlockHash, tier: Tier) -> u64 {
    const LOW: u64 = 0x00ff_ffff_ffff_ffff;
    let low = h.0 & LOW;
    let rotated = |bytes: u32| ((low << (8 * bytes)) | (low >> (56 - 8 * bytes))) & LOW;
    match tier {
        Tier::Gpu => h.0,
        Tier::Cpu => h.0 ^ rotated(1),
        Tier::Disk => h.0 ^ rotated(2),
    }
}

/// The digest bucket of a hash: its first byte.
pub fn digest_bucket(h: BlockHash) -> usize {
    (h.0 >> 56) as usize
}

/// A differing bucket as a sync check names it: `"3a"` for a model in one
/// shard, `"<shard>:3a"` for a sharded one. Returns (shard, bucket); None
/// for anything else.
pub fn parse_bucket_name(name: &str) -> Option<(usize, usize)> {
    let (shard, hex) = match name.split_once(':') {
        Some((s, hex)) => (s.parse().ok()?, hex),
        None => (0, name),
    };
    if hex.len() != 2 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let bucket = u8::from_str_radix(hex, 16).ok()?;
    Some((shard, usize::from(bucket)))
}

/// [`digests`] as the sync check sends them: 16 lower-case hex digits per
/// bucket, buckets in order, one string.
pub fn digests_hex(digests: &[u64; DIGEST_BUCKETS]) -> String {
    digests.iter().map(|d| format!("{d:016x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefill_branching_between_anchors_indexes_its_parent() {
        // Blocks 0..13 shared, a new run from 13: block 12 is the branch.
        assert_eq!(branch_point(13, 10), Some(12));
        // From an anchor: nothing to add.
        assert_eq!(branch_point(8, 10), None);
        assert_eq!(branch_point(16, 3), None);
        // A chain's first run and decode steps (one block) add nothing.
        assert_eq!(branch_point(0, 10), None);
        assert_eq!(branch_point(13, 1), None);
    }

    #[test]
    fn positions_are_anchors_and_the_tip() {
        assert_eq!(indexed_positions(0).count(), 0);
        assert_eq!(indexed_positions(1).collect::<Vec<_>>(), [0]);
        assert_eq!(indexed_positions(3).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(indexed_positions(6).collect::<Vec<_>>(), [0, 1, 3, 5]);
        assert_eq!(indexed_positions(16).collect::<Vec<_>>(), [0, 1, 3, 7, 15]);
        assert_eq!(
            indexed_positions(17).collect::<Vec<_>>(),
            [0, 1, 3, 7, 15, 16]
        );
        assert_eq!(
            indexed_positions(40).collect::<Vec<_>>(),
            [0, 1, 3, 7, 15, 31, 39]
        );
        assert_eq!(indexed_positions(1000).count(), 67);
        for n in 0..200 {
            for p in indexed_positions(n) {
                assert!(p < n && (is_anchor(p) || p == n - 1), "{n}: {p}");
            }
            let anchors = (0..n).filter(|&p| is_anchor(p)).count();
            let tip = usize::from(n > 0 && !is_anchor(n - 1));
            assert_eq!(indexed_positions(n).count(), anchors + tip, "{n}");
        }
    }

    #[test]
    fn covered_is_where_the_held_positions_end() {
        for blocks in 0..200 {
            let positions: Vec<usize> = indexed_positions(blocks).collect();
            assert_eq!(blocks_covered(0, blocks), 0);
            for (k, &p) in positions.iter().enumerate() {
                assert_eq!(blocks_covered(k + 1, blocks), p + 1, "{blocks} {k}");
            }
        }
    }

    #[test]
    fn tier_terms_keep_the_bucket_and_differ_per_tier() {
        let h = BlockHash(0xab12_3456_789a_bcde);
        assert_eq!(digest_term(h, Tier::Gpu), h.0);
        // 12 34 56 78 9a bc de rotated by one byte: 34 56 78 9a bc de 12.
        assert_eq!(digest_term(h, Tier::Cpu), h.0 ^ 0x0034_5678_9abc_de12);
        assert_eq!(digest_term(h, Tier::Disk), h.0 ^ 0x0056_789a_bcde_1234);
        let d = tiered_digests([
            (h, Tier::Cpu),
            (BlockHash(0xab00_0000_0000_0001), Tier::Gpu),
        ]);
        assert_eq!(d[0xab], digest_term(h, Tier::Cpu) ^ 0xab00_0000_0000_0001);
        assert_eq!(
            tiered_digests([(h, Tier::Gpu)]),
            digests([h]),
            "a GPU set's digests are its hashes'"
        );
    }

    #[test]
    fn digests_xor_each_bucket() {
        let d = digests([
            BlockHash(0x01aa),
            BlockHash(0x0100),
            BlockHash(0xff00_0000_0000_0001),
        ]);
        assert_eq!(d[0], 0x01aa ^ 0x0100);
        assert_eq!(d[255], 0xff00_0000_0000_0001);
        let hex = digests_hex(&d);
        assert_eq!(hex.len(), 4096);
        assert_eq!(&hex[..16], "00000000000000aa");
        assert_eq!(&hex[4080..], "ff00000000000001");
    }

    #[test]
    fn runs_index_anchors_and_their_last_block() {
        assert!(is_indexed_in_run(15, 0, 1));
        assert!(!is_indexed_in_run(16, 0, 1));
        assert!(is_indexed_in_run(20, 4, 5));
        assert!(!is_indexed_in_run(19, 3, 5));
    }

    #[test]
    fn bucket_names_parse_with_and_without_a_shard() {
        assert_eq!(parse_bucket_name("3a"), Some((0, 0x3a)));
        assert_eq!(parse_bucket_name("2:ff"), Some((2, 0xff)));
        for bad in ["3", "abc", "zz", "x:00", ":00", "1:", "-1:00", "+a"] {
            assert_eq!(parse_bucket_name(bad), None, "{bad}");
        }
        assert_eq!(digest_bucket(BlockHash(0xab00_0000_0000_0001)), 0xab);
    }
}
