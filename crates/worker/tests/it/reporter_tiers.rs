//! The reporter's KV tiers: each block is reported on its best medium, from
//! vLLM's per-medium events, so a demotion or a promotion is a store on the
//! new tier and only the removal of a block's last copy an eviction.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::HashMap;

use protocol::Tier;
use protocol::hashing::{BlockHash, BlockHasher};
use protocol::kv_events::{BlockRemoved, BlockStored, EngineHash, KvEvent};
use worker::reporter::{BlockDelta, EngineBlocks};

fn hashes(blocks: &[protocol::family::FamilyBlock]) -> Vec<BlockHash> {
    blocks.iter().map(|b| b.hash).collect()
}

/// Each block is reported on its best tier: a demotion (the GPU copy
/// removed, a CPU copy kept) and a promotion (stored on the GPU again) are
/// stores on the new tier, an unknown medium is disk, and only the removal
/// of the last copy is an eviction. Snapshots carry the tiers too.
#[test]
fn tier_changes_are_reported_as_stores_on_the_new_tier() {
    let hasher = BlockHasher::default();
    let mut blocks = EngineBlocks::new(hasher.clone(), HashMap::new(), 64);
    let tokens: Vec<u32> = (0..16).collect();
    let router = hasher.block_hashes(&tokens, &Default::default())[0];
    let event = |medium: &str, toks: &[u32], stored: bool| {
        let hashes = vec![EngineHash::Int(1)];
        if stored {
            KvEvent::BlockStored(BlockStored {
                block_hashes: hashes,
                token_ids: toks.to_vec(),
                block_size: 16,
                medium: Some(medium.into()),
                ..BlockStored::default()
            })
        } else {
            KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: hashes,
                medium: Some(medium.into()),
                ..BlockRemoved::default()
            })
        }
    };
    let step = |blocks: &mut EngineBlocks, e: KvEvent| {
        let mut d = BlockDelta::default();
        blocks.apply(&e, &mut d);
        let tiers: Vec<Tier> = d.stored.iter().map(|b| b.tier).collect();
        (tiers, hashes(&d.removed))
    };
    let none: Vec<BlockHash> = Vec::new();
    assert_eq!(
        step(&mut blocks, event("GPU", &tokens, true)),
        (vec![Tier::Gpu], none.clone())
    );
    assert_eq!(
        step(&mut blocks, event("CPU", &[], true)),
        (vec![], none.clone())
    );
    assert_eq!(
        step(&mut blocks, event("LocalDiskBackend", &[], true)),
        (vec![], none.clone())
    );
    assert_eq!(blocks.snapshot()[0].tier, Tier::Gpu);
    // Demoted: GPU copy removed, best now the CPU's.
    assert_eq!(
        step(&mut blocks, event("GPU", &[], false)),
        (vec![Tier::Cpu], none.clone())
    );
    assert_eq!(blocks.snapshot()[0].tier, Tier::Cpu);
    // Then off the CPU too: on disk.
    assert_eq!(
        step(&mut blocks, event("CPU", &[], false)),
        (vec![Tier::Disk], none.clone())
    );
    // Loaded back onto the GPU (stored with its tokens again).
    assert_eq!(
        step(&mut blocks, event("GPU", &tokens, true)),
        (vec![Tier::Gpu], none.clone())
    );
    assert_eq!(
        step(&mut blocks, event("GPU", &[], false)),
        (vec![Tier::Disk], none.clone())
    );
    // The last copy removed: an eviction.
    assert_eq!(
        step(&mut blocks, event("LocalDiskBackend", &[], false)),
        (vec![], vec![router])
    );
    assert!(blocks.snapshot().is_empty());
}
