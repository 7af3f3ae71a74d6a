//! Block hashes: the engine's 64-bit external block hash, its text forms, and
//! how to compute it from tokens the way vLLM does (`sha256_cbor`).

mod block_hash;
pub mod cbor;
mod chain;

pub use block_hash::{BlockHash, ParseBlockHashError};
pub use chain::{
    BlockDigest, BlockHasher, BlockTrace, DEFAULT_BLOCK_SIZE, DEFAULT_NONE_HASH_SEED, ExtraKeys,
    HashSeed, InvalidBlockSize, LoraKey, MultimodalItem,
};
