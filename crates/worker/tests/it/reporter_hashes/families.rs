//! What is reported for prefix families: anchors and the ends of prefill
//! runs only, head blocks without a family, a branch's parent.

use super::*;

#[test]
fn only_anchors_and_the_ends_of_prefill_runs_are_reported() {
    let hasher = BlockHasher::default();
    let mut blocks = EngineBlocks::new(hasher.clone(), HashMap::new(), 1 << 10);
    let tokens: Vec<u32> = (0..48 * 16).collect();
    let router = hasher.block_hashes(&tokens, &Default::default());
    let run = |from: usize, to: usize| stored_run(&tokens, from, to);
    // A 40-block prefill: anchors 0, 1, 3, 7, 15 and 31, and its last
    // block, 39.
    let mut d = BlockDelta::default();
    blocks.apply(&run(0, 40), &mut d);
    let prefill: Vec<BlockHash> = [0, 1, 3, 7, 15, 31, 39].map(|p| router[p]).to_vec();
    assert_eq!(hashes(&d.stored), prefill);
    // Every block is in the chain's family: its first block.
    assert!(d.stored.iter().all(|b| b.family == Some(router[0])));
    // Decode steps, one block each: only the anchor (47) is reported.
    let mut d = BlockDelta::default();
    for i in 40..48 {
        blocks.apply(&run(i, i + 1), &mut d);
    }
    assert_eq!(hashes(&d.stored), [router[47]]);
    assert_eq!(blocks.len(), 48);
    let mut snapshot = hashes(&blocks.snapshot());
    snapshot.sort();
    let mut want = prefill.clone();
    want.push(router[47]);
    want.sort();
    assert_eq!(snapshot, want);
    // Removing unreported blocks reports nothing; a reported one, itself.
    let mut d = BlockDelta::default();
    let removed = |i: u64| {
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![EngineHash::Int(i)],
            ..BlockRemoved::default()
        })
    };
    blocks.apply(&removed(46), &mut d);
    assert!(d.is_empty());
    blocks.apply(&removed(47), &mut d);
    assert_eq!(hashes(&d.removed), [router[47]]);
}

#[test]
fn head_blocks_have_no_family_and_the_rest_share_one() {
    let hasher = BlockHasher::default();
    let mut blocks =
        EngineBlocks::new(hasher.clone(), HashMap::new(), 1 << 10).with_family_blocks(3);
    let tokens: Vec<u32> = (0..20 * 16).collect();
    let router = hasher.block_hashes(&tokens, &Default::default());
    let run = |from: usize, to: usize| stored_run(&tokens, from, to);
    // Two events: the family carries over from the parent.
    let mut d = BlockDelta::default();
    blocks.apply(&run(0, 2), &mut d);
    blocks.apply(&run(2, 20), &mut d);
    let got: Vec<(BlockHash, Option<BlockHash>)> =
        d.stored.iter().map(|b| (b.hash, b.family)).collect();
    // Anchors 0, 1 (head, no family), 3, 7, 15 and the tip 19 (family:
    // block 2, the third).
    let f = Some(router[2]);
    assert_eq!(
        got,
        [
            (router[0], None),
            (router[1], None),
            (router[3], f),
            (router[7], f),
            (router[15], f),
            (router[19], f)
        ]
    );
}

/// A `BlockStored` of engine blocks `from..to` of one chain (engine hash =
/// position), with their tokens.
fn stored_run(tokens: &[u32], from: usize, to: usize) -> KvEvent {
    KvEvent::BlockStored(BlockStored {
        block_hashes: (from..to).map(|i| EngineHash::Int(i as u64)).collect(),
        parent_block_hash: from.checked_sub(1).map(|p| EngineHash::Int(p as u64)),
        token_ids: tokens[from * 16..to * 16].to_vec(),
        block_size: 16,
        ..BlockStored::default()
    })
}

/// A run of `n` blocks with engine hashes `first..first + n`, after
/// `parent` (an engine hash), 16 tokens each.
fn run_event(first: u64, n: usize, parent: Option<u64>) -> KvEvent {
    KvEvent::BlockStored(BlockStored {
        block_hashes: (0..n as u64).map(|i| EngineHash::Int(first + i)).collect(),
        parent_block_hash: parent.map(EngineHash::Int),
        token_ids: (0..n as u32 * 16).map(|t| 100 + t + first as u32).collect(),
        block_size: 16,
        ..BlockStored::default()
    })
}

#[test]
fn a_prefill_that_branches_between_anchors_reports_its_parent() {
    let hasher = BlockHasher::new(16, &HashSeed::Default).unwrap();
    let mut blocks = EngineBlocks::new(hasher, HashMap::new(), 1 << 20);
    let mut first = BlockDelta::default();
    blocks.apply(&run_event(1000, 24, None), &mut first);
    // Anchors ending 1, 2, 4, 8, 16 blocks and the tip (24).
    assert_eq!(first.stored.len(), 6);
    let indexed: BTreeSet<u64> = first.stored.iter().map(|b| b.hash.0).collect();
    // A second prompt shares 13 blocks: its run grows from block 13
    // (engine hash 1012), which becomes indexed, once.
    let mut branch = BlockDelta::default();
    blocks.apply(&run_event(2000, 5, Some(1012)), &mut branch);
    let new: Vec<u64> = branch
        .stored
        .iter()
        .map(|b| b.hash.0)
        .filter(|h| !indexed.contains(h))
        .collect();
    // The branch point, then the new run's anchor (16th block) and tip.
    assert_eq!(new.len(), 3, "{new:?}");
    let branch_point = new[0];
    let mut again = BlockDelta::default();
    blocks.apply(&run_event(3000, 5, Some(1012)), &mut again);
    assert!(!again.stored.iter().any(|b| b.hash.0 == branch_point));
    // A decode step (one block) from an unindexed block indexes nothing.
    let mut decode = BlockDelta::default();
    blocks.apply(&run_event(4000, 1, Some(1005)), &mut decode);
    assert!(decode.stored.is_empty());
    // Evicting the branch point reports it gone.
    let mut gone = BlockDelta::default();
    blocks.apply(
        &KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![EngineHash::Int(1012)],
            ..BlockRemoved::default()
        }),
        &mut gone,
    );
    assert_eq!(gone.removed.len(), 1);
    assert_eq!(gone.removed[0].hash.0, branch_point);
}
