//! The reporter's cost per engine block: decoding vLLM's msgpack batches
//! and re-hashing each stored block into the router's hash (sha256_cbor),
//! then removing them. A vLLM engine stores at most a few thousand blocks
//! per second; this shows how far below one core that keeps the reporter.
//!
//! `cargo bench --bench reporter_bench`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::HashMap;
use std::time::Instant;

use protocol::hashing::BlockHasher;
use protocol::kv_events::{
    BlockRemoved, BlockStored, EngineHash, KvEvent, KvEventBatch, decode_batch, encode_batch,
};
use worker::reporter::{BlockDelta, EngineBlocks};

const CHAINS: u64 = 2_000;
const BLOCKS_PER_CHAIN: u64 = 32;

/// One batch per chain: its 32 blocks stored in one event, as vLLM reports
/// a finished prefill.
fn stored_batches() -> Vec<Vec<u8>> {
    (0..CHAINS)
        .map(|c| {
            let event = KvEvent::BlockStored(BlockStored {
                block_hashes: (0..BLOCKS_PER_CHAIN)
                    .map(|b| EngineHash::Int(c * 1_000 + b + 1))
                    .collect(),
                parent_block_hash: None,
                token_ids: (0..BLOCKS_PER_CHAIN * 16)
                    .map(|t| (1_000 + (c * 7 + t) % 100_000) as u32)
                    .collect(),
                block_size: 16,
                medium: Some("GPU".into()),
                ..BlockStored::default()
            });
            encode_batch(&KvEventBatch {
                ts: c as f64,
                events: vec![event],
                data_parallel_rank: Some(0),
                extra_fields: 0,
            })
            .expect("encode")
        })
        .collect()
}

fn removed_batches() -> Vec<Vec<u8>> {
    (0..CHAINS)
        .map(|c| {
            let event = KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: (0..BLOCKS_PER_CHAIN)
                    .rev()
                    .map(|b| EngineHash::Int(c * 1_000 + b + 1))
                    .collect(),
                medium: Some("GPU".into()),
                ..BlockRemoved::default()
            });
            encode_batch(&KvEventBatch {
                ts: c as f64,
                events: vec![event],
                data_parallel_rank: Some(0),
                extra_fields: 0,
            })
            .expect("encode")
        })
        .collect()
}

fn main() {
    let stored = stored_batches();
    let removed = removed_batches();
    let blocks = (CHAINS * BLOCKS_PER_CHAIN) as f64;
    println!("| step | blocks | total | per block |");
    println!("|---|---:|---:|---:|");
    for round in 0..3 {
        let mut set = EngineBlocks::new(BlockHasher::default(), HashMap::new(), 1 << 22);
        let t = Instant::now();
        let decoded: Vec<KvEventBatch> = stored
            .iter()
            .map(|p| decode_batch(p).expect("decode"))
            .collect();
        let decode = t.elapsed();
        let t = Instant::now();
        for batch in &decoded {
            for e in &batch.events {
                set.apply(e, &mut BlockDelta::default());
            }
        }
        let apply = t.elapsed();
        assert_eq!(set.len() as f64, blocks);
        let t = Instant::now();
        for p in &removed {
            for e in &decode_batch(p).expect("decode").events {
                set.apply(e, &mut BlockDelta::default());
            }
        }
        let remove = t.elapsed();
        assert!(set.is_empty());
        if round == 2 {
            for (name, d) in [
                ("decode BlockStored", decode),
                ("re-hash and insert", apply),
                ("decode and apply BlockRemoved", remove),
            ] {
                println!(
                    "| {name} | {blocks} | {:.1} ms | {:.2} µs |",
                    d.as_secs_f64() * 1e3,
                    d.as_secs_f64() * 1e6 / blocks
                );
            }
        }
    }
}
