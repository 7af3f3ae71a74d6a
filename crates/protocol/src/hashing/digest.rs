//! The digests of vLLM's block-hash chain: [`BlockDigest`], and NONE_HASH,
//! the parent of block 0, derived from the engine's [`HashSeed`].

use sha2::{Digest, Sha256};

use super::BlockHash;
use super::cbor;

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
    pub(super) fn of(bytes: &[u8]) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_hash_matches_the_readme_examples() {
        assert_eq!(
            HashSeed::PythonHashSeed("0".into()).none_hash().to_hex(),
            "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e"
        );
        assert_eq!(
            HashSeed::Default.none_hash().to_hex(),
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
    fn external_is_the_last_eight_bytes_big_endian() {
        let mut bytes = [0u8; 32];
        bytes[24..].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        bytes[0] = 0xff;
        let d = BlockDigest(bytes);
        assert_eq!(d.external(), BlockHash(0x0102_0304_0506_0708));
        assert_eq!(BlockHash::from(d), d.external());
        assert_eq!(d.as_bytes(), &bytes);
        assert_eq!(d.to_hex().len(), 64);
        assert!(d.to_hex().starts_with("ff00"));
        assert_eq!(format!("{d:?}"), format!("BlockDigest({d})"));
    }
}
