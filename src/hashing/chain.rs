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
//! engine. Extra keys use the tagged shape of vLLM >= 0.31.

use sha2::{Digest, Sha256};

use super::BlockHash;
use super::cbor;

/// vLLM's default KV-cache block size (`--block-size`), in tokens.
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// The string vLLM >= 0.29 hashes into NONE_HASH when `PYTHONHASHSEED` is
/// unset (for the sha256 algorithms).
pub const DEFAULT_NONE_HASH_SEED: &str = "vllm-none-hash";

/// Which string the engine hashes into NONE_HASH, the parent of block 0.
///
/// It must match the engine's environment: every block hash in a request
/// chains from NONE_HASH, so a different seed changes every hash.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HashSeed {
    /// `PYTHONHASHSEED` is unset in the engine: the seed is
    /// [`DEFAULT_NONE_HASH_SEED`]. Only valid for vLLM >= 0.29; older
    /// releases draw a random NONE_HASH, which nobody can reproduce.
    #[default]
    Default,
    /// `PYTHONHASHSEED` is set in the engine to this value. vLLM hashes the
    /// raw string, whatever it is; the empty string counts as set.
    PythonHashSeed(String),
}

impl HashSeed {
    /// Builds the seed from the engine's `PYTHONHASHSEED` value as read from
    /// its environment (`None` when the variable is unset), mirroring
    /// `os.getenv("PYTHONHASHSEED")` in vLLM's `init_none_hash`.
    pub fn from_env_value(value: Option<String>) -> Self {
        match value {
            Some(v) => HashSeed::PythonHashSeed(v),
            None => HashSeed::Default,
        }
    }

    /// The exact string that is hashed into NONE_HASH.
    pub fn seed_str(&self) -> &str {
        match self {
            HashSeed::Default => DEFAULT_NONE_HASH_SEED,
            HashSeed::PythonHashSeed(v) => v,
        }
    }

    /// NONE_HASH = sha256(cbor(text seed_str)): the parent digest of block 0.
    pub fn none_hash(&self) -> BlockDigest {
        let mut buf = Vec::with_capacity(self.seed_str().len() + 9);
        cbor::write_text(&mut buf, self.seed_str());
        BlockDigest::of(&buf)
    }
}

/// A full 32-byte SHA-256 block digest, as the engine keeps it internally.
///
/// The router indexes blocks by the 64-bit [`BlockHash`], but the full digest
/// is the chain's parent value and is what an engine publishes when
/// `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`, so both forms are exposed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockDigest(pub [u8; 32]);

impl BlockDigest {
    /// SHA-256 of `bytes`.
    fn of(bytes: &[u8]) -> Self {
        BlockDigest(Sha256::digest(bytes).into())
    }

    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The external hash vLLM puts in KV events by default:
    /// `int.from_bytes(digest, "big") & (2**64 - 1)`, i.e. the last 8 bytes
    /// read big-endian.
    pub fn external(&self) -> BlockHash {
        let mut tail = [0u8; 8];
        tail.copy_from_slice(&self.0[24..]);
        BlockHash(u64::from_be_bytes(tail))
    }

    /// The digest as 64 lower-case hex digits, for logs and reports.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl From<BlockDigest> for BlockHash {
    /// Same as [`BlockDigest::external`].
    fn from(d: BlockDigest) -> Self {
        d.external()
    }
}

impl std::fmt::Display for BlockDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for BlockDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockDigest({self})")
    }
}

/// The LoRA adapter a request runs with. vLLM >= 0.31 adds
/// `("lora", lora_name, lora_path)` to the extra keys of every block, so
/// requests for different adapters never share cached blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoraKey {
    /// `LoRARequest.lora_name`: the adapter name clients put in `model`.
    pub name: String,
    /// `LoRARequest.lora_path`: where the engine loaded the adapter from.
    pub path: String,
}

/// One multimodal placeholder in the prompt (an image, audio clip, ...).
/// Blocks that overlap it get `("mm", identifier, offset_in_block)` so that
/// identical placeholder tokens for different media hash differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultimodalItem {
    /// `MultiModalFeatureSpec.identifier`: the engine's content hash of the
    /// item (prefixed with the LoRA name when tower-connector LoRA is on).
    pub identifier: String,
    /// Index of the item's first placeholder token in the prompt.
    pub offset: u64,
    /// Number of placeholder tokens.
    pub length: u64,
}

/// Per-request inputs to the block hash besides the tokens.
///
/// An empty value (the [`Default`]) gives `null` extra keys on every block,
/// the plain text-only case.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExtraKeys {
    /// The LoRA adapter, if the request uses one.
    pub lora: Option<LoraKey>,
    /// Multimodal items, sorted by offset and non-overlapping, as vLLM
    /// requires (it looks them up by bisection).
    pub multimodal: Vec<MultimodalItem>,
    /// The request's `cache_salt`. It only affects block 0, and an empty
    /// salt counts as none (vLLM tests the string's truthiness).
    pub cache_salt: Option<String>,
}

impl ExtraKeys {
    /// The salt as vLLM sees it: `None` for a missing or empty salt.
    fn effective_salt(&self) -> Option<&str> {
        self.cache_salt.as_deref().filter(|s| !s.is_empty())
    }

    /// The multimodal items overlapping tokens `[start, end)`, chosen exactly
    /// like vLLM's `get_mm_features_in_window` (two bisections, then a slice).
    fn multimodal_in(&self, start: u64, end: u64) -> &[MultimodalItem] {
        let items = &self.multimodal;
        let lo = items.partition_point(|m| m.offset.saturating_add(m.length) <= start);
        let hi = items.partition_point(|m| m.offset < end);
        items.get(lo..hi).unwrap_or(&[])
    }
}

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
/// Built once per engine configuration (block size and hash seed), so that
/// NONE_HASH is computed once; per-request inputs are passed as
/// [`ExtraKeys`]. Only full blocks are hashed: a trailing partial block is
/// not cached by the engine, so it has no hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHasher {
    block_size: usize,
    none_hash: BlockDigest,
}

impl BlockHasher {
    /// A hasher for an engine with this `--block-size` and hash seed.
    pub fn new(block_size: usize, seed: &HashSeed) -> Result<Self, InvalidBlockSize> {
        if block_size == 0 {
            return Err(InvalidBlockSize);
        }
        Ok(BlockHasher {
            block_size,
            none_hash: seed.none_hash(),
        })
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

    /// The hashing loop shared by the public methods: calls `f(parent,
    /// preimage, digest)` for each full block, reusing one pre-image buffer.
    fn for_each_block(
        &self,
        tokens: &[u32],
        keys: &ExtraKeys,
        mut f: impl FnMut(&BlockDigest, &[u8], BlockDigest),
    ) {
        // The LoRA key is the same for every block: encode it once.
        let lora = keys.lora.as_ref().map(|l| {
            let mut enc = Vec::with_capacity(l.name.len() + l.path.len() + 16);
            cbor::write_array_header(&mut enc, 3);
            cbor::write_text(&mut enc, "lora");
            cbor::write_text(&mut enc, &l.name);
            cbor::write_text(&mut enc, &l.path);
            enc
        });
        let salt = keys.effective_salt();

        // 3 (outer header, bytes header) + 32 (parent) + 3 (tokens header)
        // + at most 5 bytes per u32 token, + room for typical extra keys.
        let mut buf = Vec::with_capacity(38 + 5 * self.block_size + 64);
        let mut parent = self.none_hash;
        for (i, block) in tokens.chunks_exact(self.block_size).enumerate() {
            // i * block_size <= tokens.len(), so neither can overflow.
            let start = (i * self.block_size) as u64;
            let end = start + self.block_size as u64;
            let mm = keys.multimodal_in(start, end);
            let salt = if i == 0 { salt } else { None };

            buf.clear();
            cbor::write_array_header(&mut buf, 3);
            cbor::write_bytes(&mut buf, &parent.0);
            cbor::write_array_header(&mut buf, block.len());
            for &t in block {
                cbor::write_uint(&mut buf, u64::from(t));
            }

            // vLLM's order: LoRA, multimodal, cache_salt; None if empty.
            let n_extra = usize::from(lora.is_some()) + mm.len() + usize::from(salt.is_some());
            if n_extra == 0 {
                cbor::write_null(&mut buf);
            } else {
                cbor::write_array_header(&mut buf, n_extra);
                if let Some(enc) = &lora {
                    buf.extend_from_slice(enc);
                }
                for item in mm {
                    cbor::write_array_header(&mut buf, 3);
                    cbor::write_text(&mut buf, "mm");
                    cbor::write_text(&mut buf, &item.identifier);
                    write_offset_in_block(&mut buf, item.offset, start);
                }
                if let Some(s) = salt {
                    cbor::write_array_header(&mut buf, 2);
                    cbor::write_text(&mut buf, "cache_salt");
                    cbor::write_text(&mut buf, s);
                }
            }

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
        }
    }
}

/// Writes `offset - block_start`, which is negative for an item that began
/// in an earlier block, without overflowing for any pair of u64 values.
fn write_offset_in_block(out: &mut Vec<u8>, offset: u64, block_start: u64) {
    if offset >= block_start {
        cbor::write_uint(out, offset - block_start);
    } else {
        // offset - block_start = -1 - (block_start - offset - 1)
        cbor::write_negative(out, block_start - offset - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: u32) -> Vec<u32> {
        (1000..1000 + n).collect()
    }

    fn hasher(seed: &str) -> BlockHasher {
        BlockHasher::new(16, &HashSeed::PythonHashSeed(seed.into())).unwrap()
    }

    #[test]
    fn none_hash_matches_the_readme_examples() {
        assert_eq!(
            hasher("0").none_hash().to_hex(),
            "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e"
        );
        assert_eq!(
            BlockHasher::default().none_hash().to_hex(),
            "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0"
        );
        assert_eq!(HashSeed::from_env_value(None), HashSeed::Default);
        assert_eq!(HashSeed::from_env_value(None).seed_str(), "vllm-none-hash");
        // An empty PYTHONHASHSEED is "set": it hashes "", not the default.
        let empty = HashSeed::from_env_value(Some(String::new()));
        assert_eq!(empty.seed_str(), "");
        assert_ne!(empty.none_hash(), HashSeed::Default.none_hash());
    }

    #[test]
    fn readme_worked_example_block_zero() {
        let toks = [
            128000, 9906, 11, 856, 836, 374, 0, 23, 24, 255, 256, 65535, 65536, 100000, 151643, 2,
        ];
        let d = hasher("0").block_digests(&toks, &ExtraKeys::default());
        assert_eq!(d.len(), 1);
        assert!(d[0].to_hex().starts_with("4be2efbf"));
        assert_eq!(d[0].external(), BlockHash(0x7219_bff9_b083_37ef));
        assert_eq!(BlockHash::from(d[0]), BlockHash(0x7219_bff9_b083_37ef));
    }

    #[test]
    fn only_full_blocks_are_hashed() {
        let h = BlockHasher::default();
        let keys = ExtraKeys::default();
        assert_eq!(h.block_hashes(&tokens(40), &keys).len(), 2);
        assert_eq!(h.block_hashes(&tokens(15), &keys).len(), 0);
        assert_eq!(h.block_hashes(&tokens(16), &keys).len(), 1);
        assert_eq!(h.block_hashes(&[], &keys).len(), 0);
        // The tail does not influence the full blocks' hashes.
        assert_eq!(
            h.block_hashes(&tokens(40), &keys),
            h.block_hashes(&tokens(32), &keys)
        );
        let small = BlockHasher::new(4, &HashSeed::Default).unwrap();
        assert_eq!(small.block_hashes(&tokens(40), &keys).len(), 10);
    }

    #[test]
    fn zero_block_size_is_rejected() {
        assert_eq!(
            BlockHasher::new(0, &HashSeed::Default),
            Err(InvalidBlockSize)
        );
    }

    #[test]
    fn blocks_chain_from_their_parent() {
        let h = hasher("12345");
        let traces = h.block_traces(&tokens(48), &ExtraKeys::default());
        assert_eq!(traces.len(), 3);
        assert_eq!(traces[0].parent, *h.none_hash());
        assert_eq!(traces[1].parent, traces[0].digest);
        assert_eq!(traces[2].parent, traces[1].digest);
        for t in &traces {
            assert_eq!(BlockDigest::of(&t.preimage), t.digest);
            assert_eq!(&t.preimage[..3], &[0x83, 0x58, 0x20]);
            assert_eq!(&t.preimage[3..35], t.parent.as_bytes());
            assert_eq!(*t.preimage.last().unwrap(), 0xf6);
        }
        let digests = h.block_digests(&tokens(48), &ExtraKeys::default());
        let hashes = h.block_hashes(&tokens(48), &ExtraKeys::default());
        assert_eq!(
            digests
                .iter()
                .map(BlockDigest::external)
                .collect::<Vec<_>>(),
            hashes
        );
    }

    #[test]
    fn empty_cache_salt_is_no_salt() {
        let h = BlockHasher::default();
        let none = h.block_hashes(&tokens(32), &ExtraKeys::default());
        let empty = ExtraKeys {
            cache_salt: Some(String::new()),
            ..ExtraKeys::default()
        };
        assert_eq!(h.block_hashes(&tokens(32), &empty), none);
        let salted = ExtraKeys {
            cache_salt: Some("s".into()),
            ..ExtraKeys::default()
        };
        let s = h.block_hashes(&tokens(32), &salted);
        // The salt changes block 0, and through the chain every later block.
        assert_ne!(s[0], none[0]);
        assert_ne!(s[1], none[1]);
        let traces = h.block_traces(&tokens(32), &salted);
        assert_eq!(*traces[1].preimage.last().unwrap(), 0xf6);
    }

    #[test]
    fn multimodal_window_matches_vllm_bisection() {
        let item = |id: &str, offset, length| MultimodalItem {
            identifier: id.into(),
            offset,
            length,
        };
        let keys = ExtraKeys {
            multimodal: vec![item("a", 4, 12), item("b", 16, 20), item("c", 40, 4)],
            ..ExtraKeys::default()
        };
        let ids = |s, e| {
            keys.multimodal_in(s, e)
                .iter()
                .map(|m| m.identifier.as_str())
                .collect::<Vec<_>>()
        };
        // "a" ends exactly at 16, so it is not in block [16, 32).
        assert_eq!(ids(0, 16), ["a"]);
        assert_eq!(ids(16, 32), ["b"]);
        assert_eq!(ids(32, 48), ["b", "c"]);
        assert!(ids(48, 64).is_empty());
    }

    #[test]
    fn offset_in_block_can_be_negative() {
        let enc = |offset, start| {
            let mut out = Vec::new();
            write_offset_in_block(&mut out, offset, start);
            out
        };
        assert_eq!(enc(4, 0), [0x04]);
        assert_eq!(enc(4, 16), [0x2b]); // -12
        assert_eq!(
            enc(0, u64::MAX),
            [0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]
        );
        assert_eq!(
            enc(u64::MAX, 0),
            [0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
    }
}
