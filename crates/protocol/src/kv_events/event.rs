//! The decoded KV-event model: what one vLLM `KVEventBatch` says, independent
//! of which wire format (map or positional array) carried it.
//!
//! Field names and meanings follow vLLM's `vllm/distributed/kv_events.py`
//! (0.33.0). Every field vLLM may leave out is an `Option`, so one model
//! covers every release from 0.9 to 0.33: a field an older engine did not
//! have simply decodes as `None`.

use crate::hashing::BlockHash;

/// One block hash as the engine sent it.
///
/// vLLM sends a `u64` by default and the full digest as `bin` when
/// `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`; both are kept exactly so that the
/// encoder can reproduce the engine's bytes. Use
/// [`EngineHash::to_block_hash`] for the router's 64-bit key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EngineHash {
    /// An integer hash, any MessagePack width. Old engines (Python `hash()`)
    /// could send negative values; they are kept as their 64-bit two's
    /// complement, which is the same "last 8 bytes" reading vLLM applies to
    /// digests.
    Int(u64),
    /// The full block digest (32 bytes for `sha256*`, 16 for `xxhash*`).
    Bytes(Vec<u8>),
}

impl EngineHash {
    /// The router's [`BlockHash`]: the integer itself, or the digest's last
    /// (up to) 8 bytes read big-endian, i.e. vLLM's
    /// `int.from_bytes(digest, "big") & (2**64 - 1)`.
    pub fn to_block_hash(&self) -> BlockHash {
        match self {
            Self::Int(v) => BlockHash(*v),
            Self::Bytes(digest) => {
                let tail = &digest[digest.len().saturating_sub(8)..];
                BlockHash(tail.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
            }
        }
    }
}

impl From<u64> for EngineHash {
    fn from(value: u64) -> Self {
        Self::Int(value)
    }
}

impl From<BlockHash> for EngineHash {
    fn from(value: BlockHash) -> Self {
        Self::Int(value.0)
    }
}

/// vLLM's `BlockStored`: full blocks that entered the engine's prefix cache.
///
/// The first seven fields have no default in vLLM, so map-format engines
/// always send them (possibly as nil); the rest are omitted while they hold
/// their default (`None`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockStored {
    /// The new blocks' hashes, in prompt order.
    pub block_hashes: Vec<EngineHash>,
    /// The hash of the block before the first new one; `None` when the first
    /// new block starts the prompt.
    pub parent_block_hash: Option<EngineHash>,
    /// The tokens of all new blocks (`block_size` per block).
    pub token_ids: Vec<u32>,
    /// Tokens per block.
    pub block_size: u32,
    /// Deprecated LoRA integer id (vLLM keeps it for compatibility).
    pub lora_id: Option<i64>,
    /// Where the blocks live (`"GPU"`, `"CPU"`, ...); vLLM >= 0.10.2.
    pub medium: Option<String>,
    /// The LoRA adapter name that keys the hash; vLLM >= 0.14.
    pub lora_name: Option<String>,
    /// Per-block extra hash keys, untagged (LoRA name, `[identifier, offset]`,
    /// salt, or nil), kept opaque because their shape varies by vLLM version;
    /// vLLM >= 0.17.
    pub extra_keys: Option<Vec<rmpv::Value>>,
    /// KV-cache group index (hybrid models); vLLM >= 0.20.
    pub group_idx: Option<i64>,
    /// The group's cache-spec kind, e.g. `"full_attention"`; vLLM >= 0.22.
    pub kv_cache_spec_kind: Option<String>,
    /// Sliding-window size of the group's cache spec; vLLM >= 0.22.
    pub kv_cache_spec_sliding_window: Option<i64>,
    /// `"LOCAL"` or `"REMOTE"` relative to the publisher; vLLM >= 0.26.
    pub locality: Option<String>,
    /// Offloading tier that generated the event; vLLM >= 0.29.
    pub ownership: Option<String>,
    /// Session the blocks belong to; vLLM >= 0.30.
    pub session_id: Option<String>,
    /// vLLM >= 0.33 (speculative decoding lookahead). Kept opaque: its wire
    /// type is not covered by the recorded vectors, and a guess that turned
    /// out wrong would make every such event undecodable.
    pub lookahead_token_ids: Option<rmpv::Value>,
    /// Map entries with keys this decoder does not know (fields of a newer
    /// vLLM), in wire order, so they are neither lost nor fatal.
    pub other_fields: Vec<(String, rmpv::Value)>,
}

/// vLLM's `BlockRemoved`: blocks evicted from the engine's prefix cache.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlockRemoved {
    /// The evicted blocks' hashes.
    pub block_hashes: Vec<EngineHash>,
    /// Where the blocks lived; vLLM >= 0.10.2.
    pub medium: Option<String>,
    /// KV-cache group index; vLLM >= 0.20.
    pub group_idx: Option<i64>,
    /// `"LOCAL"` or `"REMOTE"`; vLLM >= 0.26.
    pub locality: Option<String>,
    /// Offloading tier; vLLM >= 0.29.
    pub ownership: Option<String>,
    /// Map entries with unknown keys, in wire order.
    pub other_fields: Vec<(String, rmpv::Value)>,
}

/// An event whose `type` tag this decoder does not know (a newer vLLM).
///
/// It is kept, not failed, so one new event kind cannot make whole batches
/// undecodable; consumers should skip it (and may log it).
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownEvent {
    /// The event's tag, e.g. `"BlockSnapshot"`.
    pub tag: String,
    /// The whole event as it was on the wire (map or array, tag included).
    pub raw: rmpv::Value,
}

/// One KV-cache event.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "BlockStored is the common event; boxing it would add an allocation per event to save \
              space only on the rare small ones"
)]
pub enum KvEvent {
    /// Blocks were added to the prefix cache.
    BlockStored(BlockStored),
    /// Blocks were evicted.
    BlockRemoved(BlockRemoved),
    /// The engine dropped its whole prefix cache (e.g. `reset_prefix_cache`).
    AllBlocksCleared,
    /// An event kind this decoder does not know; see [`UnknownEvent`].
    Unknown(UnknownEvent),
}

impl KvEvent {
    /// The wire tag (`type` value) of this event.
    pub fn tag(&self) -> &str {
        match self {
            Self::BlockStored(_) => "BlockStored",
            Self::BlockRemoved(_) => "BlockRemoved",
            Self::AllBlocksCleared => "AllBlocksCleared",
            Self::Unknown(unknown) => &unknown.tag,
        }
    }
}

/// vLLM's `KVEventBatch`: the events of one engine step, the unit that gets a
/// sequence number on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct KvEventBatch {
    /// Engine wall-clock time of the step, seconds since the Unix epoch.
    pub ts: f64,
    /// The step's events, in the order the engine applied them.
    pub events: Vec<KvEvent>,
    /// The engine's data-parallel rank; `None` on engines older than the
    /// field (their batch has only two elements).
    pub data_parallel_rank: Option<i64>,
    /// Batch-level elements or keys this decoder does not know (a newer
    /// engine's additions), skipped; 0 when encoding.
    pub extra_fields: usize,
}

impl KvEventBatch {
    /// Fields and events a newer engine added that this decoder skipped or
    /// kept opaque: (batch-level fields, unknown event fields, unknown events).
    pub fn unknown_counts(&self) -> (usize, usize, usize) {
        let mut fields = 0;
        let mut events = 0;
        for e in &self.events {
            match e {
                KvEvent::BlockStored(s) => fields += s.other_fields.len(),
                KvEvent::BlockRemoved(r) => fields += r.other_fields.len(),
                KvEvent::AllBlocksCleared => {}
                KvEvent::Unknown(_) => events += 1,
            }
        }
        (self.extra_fields, fields, events)
    }
}
