//! The reporter's engine-hash → router-hash translation against vLLM's own
//! vectors (`shared/vllm`): with `sha256_cbor` and the same seed the two
//! hashes coincide; with vLLM's default `sha256` (pickle) events, the router
//! hashes are the `sha256_cbor` hashes of the same tokens.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::{BTreeSet, HashMap};

use protocol::Tier;
use protocol::hashing::{BlockHash, BlockHasher, HashSeed, LoraKey};
use protocol::kv_events::{BlockRemoved, BlockStored, EngineHash, KvEvent, decode_batch};
use serde_json::Value;
use worker::reporter::{Applied, BlockDelta, EngineBlocks, Unmappable};

mod families;
mod vllm_vectors;

/// The hashes of reported blocks, without their families.
fn hashes(blocks: &[protocol::family::FamilyBlock]) -> Vec<BlockHash> {
    blocks.iter().map(|b| b.hash).collect()
}
