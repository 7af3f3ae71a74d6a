//! vLLM's chained prefix-cache block hashes, `sha256_cbor` flavour.
//!
//! The router predicts which KV blocks an engine already holds by computing
//! the same block hashes the engine computes and publishes in its KV events.
//! That only works if the hashes agree bit for bit, so this module follows
//! vLLM's algorithm exactly (see `shared/vllm/README.md`, "Hash spec"):
//!
//! ```text
//! NONE_HASH = sha256(cbor(seed_str))
//! block_i   = sha256(cbor([parent, [tokens of block i], extra_keys_i or null]))
//!             parent = NONE_HASH for i == 0, else block_{i-1} (32 bytes)
//! external  = last 8 bytes of block_i, big-endian  ->  BlockHash
//! ```
//!
//! Only `--prefix-caching-hash-algo sha256_cbor` is implemented: the default
//! `sha256` hashes a pickle whose bytes depend on Python object identity
//! (memo references), and the xxhash variants have a random NONE_HASH unless
//! `PYTHONHASHSEED` is set, so neither can be reproduced reliably outside the
//! engine. The extra keys' shape depends on the engine's vLLM version: see
//! [`ExtraKeysFormat`] (the tagged shape of vLLM >= 0.31 by default).

use super::BlockHash;
use super::cbor;
use super::digest::{BlockDigest, HashSeed};
use super::extra_keys::{ExtraKeys, ExtraKeysFormat, MissingLoraIntId};
use super::key_encoding::RequestKeys;

/// vLLM's default KV-cache block size (`--block-size`), in tokens.
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// A block size of zero, which cannot split a prompt into blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("block size must be at least 1 token")]
pub struct InvalidBlockSize;

/// One hashed block with everything that went into it, for conformance tests
/// and for debugging a hash mismatch against an engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockTrace {
    /// The parent digest (NONE_HASH for block 0).
    pub parent: BlockDigest,
    /// The exact canonical CBOR bytes that were hashed.
    pub preimage: Vec<u8>,
    /// SHA-256 of `preimage`.
    pub digest: BlockDigest,
}

/// Computes an engine's block hashes for token sequences.
///
/// Built once per engine configuration (block size, hash seed and vLLM
/// version's [`ExtraKeysFormat`]), so that NONE_HASH is computed once;
/// per-request inputs are passed as [`ExtraKeys`]. Only full blocks are
/// hashed: a trailing partial block is not cached by the engine, so it has
/// no hash.
///
/// The one request the engine's hashes cannot be computed for is a LoRA
/// request without [`LoraKey::int_id`](super::LoraKey::int_id) in
/// [`ExtraKeysFormat::LegacyIntLora`]: [`check_keys`](Self::check_keys)
/// reports it, and the hashing methods return no blocks for it, so that the
/// request is routed without prefix locality rather than on wrong hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHasher {
    block_size: usize,
    none_hash: BlockDigest,
    format: ExtraKeysFormat,
}

impl BlockHasher {
    /// A hasher for an engine with this `--block-size` and hash seed, and
    /// the extra keys of vLLM >= 0.31 ([`ExtraKeysFormat::Tagged`]).
    pub fn new(block_size: usize, seed: &HashSeed) -> Result<Self, InvalidBlockSize> {
        Self::with_format(block_size, seed, ExtraKeysFormat::Tagged)
    }

    /// A hasher for an engine with this `--block-size` and hash seed, whose
    /// vLLM version hashes extra keys in `format`.
    pub fn with_format(
        block_size: usize,
        seed: &HashSeed,
        format: ExtraKeysFormat,
    ) -> Result<Self, InvalidBlockSize> {
        if block_size == 0 {
            return Err(InvalidBlockSize);
        }
        Ok(BlockHasher {
            block_size,
            none_hash: seed.none_hash(),
            format,
        })
    }

    /// The extra-key format this hasher writes.
    pub fn extra_keys_format(&self) -> ExtraKeysFormat {
        self.format
    }

    /// Whether `keys` can be hashed as the engine does: fails only for a
    /// LoRA request without `int_id` in [`ExtraKeysFormat::LegacyIntLora`],
    /// for which the hashing methods return no blocks.
    pub fn check_keys(&self, keys: &ExtraKeys) -> Result<(), MissingLoraIntId> {
        RequestKeys::new(self.format, keys).map(|_| ())
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// NONE_HASH, the parent digest of block 0.
    pub fn none_hash(&self) -> &BlockDigest {
        &self.none_hash
    }

    /// How many blocks of a `num_tokens`-token sequence get hashed.
    pub fn full_blocks(&self, num_tokens: usize) -> usize {
        num_tokens / self.block_size
    }

    /// The external 64-bit hashes of the full blocks of `tokens`, in order:
    /// the values the engine publishes in its KV events.
    pub fn block_hashes(&self, tokens: &[u32], keys: &ExtraKeys) -> Vec<BlockHash> {
        let mut out = Vec::with_capacity(self.full_blocks(tokens.len()));
        self.for_each_block(tokens, keys, |_, _, digest| out.push(digest.external()));
        out
    }

    /// The full 32-byte digests of the full blocks of `tokens`, in order, for
    /// callers that must match engines publishing full digests.
    pub fn block_digests(&self, tokens: &[u32], keys: &ExtraKeys) -> Vec<BlockDigest> {
        let mut out = Vec::with_capacity(self.full_blocks(tokens.len()));
        self.for_each_block(tokens, keys, |_, _, digest| out.push(digest));
        out
    }

    /// Like [`block_digests`](Self::block_digests), but also returns each
    /// block's parent and pre-image bytes. Allocates per block; meant for
    /// tests and diagnostics, not the request path.
    pub fn block_traces(&self, tokens: &[u32], keys: &ExtraKeys) -> Vec<BlockTrace> {
        let mut out = Vec::with_capacity(self.full_blocks(tokens.len()));
        self.for_each_block(tokens, keys, |parent, preimage, digest| {
            out.push(BlockTrace {
                parent: *parent,
                preimage: preimage.to_vec(),
                digest,
            })
        });
        out
    }

    /// Digests of the full blocks of `tokens` when they continue a chain
    /// after `parent` (`None`: they start it). This is how an engine's KV
    /// events are re-hashed: a `BlockStored` event gives its blocks' tokens
    /// and its parent, not the whole prompt. A continuing run starts at a
    /// block index of at least 1, so `cache_salt` (block 0 only) does not
    /// apply to it; multimodal offsets are taken relative to the run.
    pub fn continue_digests(
        &self,
        parent: Option<&BlockDigest>,
        tokens: &[u32],
        keys: &ExtraKeys,
    ) -> Vec<BlockDigest> {
        let mut out = Vec::with_capacity(self.full_blocks(tokens.len()));
        let (start, first) = match parent {
            Some(p) => (*p, self.block_size as u64),
            None => (self.none_hash, 0),
        };
        self.for_each_block_from(start, first, tokens, keys, |_, _, digest| out.push(digest));
        out
    }

    /// The hashing loop shared by the public methods: calls `f(parent,
    /// preimage, digest)` for each full block, reusing one pre-image buffer.
    /// Calls nothing if `keys` cannot be hashed (see
    /// [`check_keys`](Self::check_keys)).
    fn for_each_block(
        &self,
        tokens: &[u32],
        keys: &ExtraKeys,
        f: impl FnMut(&BlockDigest, &[u8], BlockDigest),
    ) {
        self.for_each_block_from(self.none_hash, 0, tokens, keys, f);
    }

    /// [`for_each_block`](Self::for_each_block) from a given parent, the
    /// first block starting at token position `first_start`.
    fn for_each_block_from(
        &self,
        start_parent: BlockDigest,
        first_start: u64,
        tokens: &[u32],
        keys: &ExtraKeys,
        mut f: impl FnMut(&BlockDigest, &[u8], BlockDigest),
    ) {
        let Ok(request_keys) = RequestKeys::new(self.format, keys) else {
            return;
        };

        // 3 (outer header, bytes header) + 32 (parent) + 3 (tokens header)
        // + at most 5 bytes per u32 token, + room for typical extra keys.
        let mut buf = Vec::with_capacity(38 + 5 * self.block_size + 64);
        let mut parent = start_parent;
        for (i, block) in tokens.chunks_exact(self.block_size).enumerate() {
            // i * block_size <= tokens.len(), so neither can overflow.
            let start = first_start + (i * self.block_size) as u64;
            let end = start + self.block_size as u64;

            buf.clear();
            cbor::write_array_header(&mut buf, 3);
            cbor::write_bytes(&mut buf, &parent.0);
            cbor::write_array_header(&mut buf, block.len());
            for &t in block {
                cbor::write_uint(&mut buf, u64::from(t));
            }

            request_keys.write_block(&mut buf, start, end);

            let digest = BlockDigest::of(&buf);
            f(&parent, &buf, digest);
            parent = digest;
        }
    }
}

impl Default for BlockHasher {
    /// Block size 16 and no `PYTHONHASHSEED`: an engine started with
    /// `--prefix-caching-hash-algo sha256_cbor` and nothing else.
    fn default() -> Self {
        BlockHasher {
            block_size: DEFAULT_BLOCK_SIZE,
            none_hash: HashSeed::Default.none_hash(),
            format: ExtraKeysFormat::Tagged,
        }
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
