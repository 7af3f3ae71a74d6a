//! Block hashes: the engine's 64-bit external block hash, and its text forms.

mod block_hash;

pub use block_hash::{BlockHash, ParseBlockHashError};
