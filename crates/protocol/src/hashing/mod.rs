//! Block hashes: the engine's 64-bit external block hash, its text forms, and
//! how to compute it from tokens the way vLLM does (`sha256_cbor`).

mod block_hash;
pub mod cbor;
mod chain;
mod digest;
mod extra_keys;
mod key_encoding;

pub use block_hash::{BlockHash, ParseBlockHashError};
pub use chain::{BlockHasher, BlockTrace, DEFAULT_BLOCK_SIZE, InvalidBlockSize};
pub use digest::{BlockDigest, DEFAULT_NONE_HASH_SEED, HashSeed};
pub use extra_keys::{ExtraKeys, ExtraKeysFormat, LoraKey, MissingLoraIntId, MultimodalItem};
