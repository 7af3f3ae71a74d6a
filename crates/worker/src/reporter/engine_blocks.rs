//! One engine's live KV blocks, in the router's block hashes.
//!
//! vLLM's default block hash (`sha256` over pickle) cannot be reproduced
//! outside Python, so the reporter never relies on it: every `BlockStored`
//! carries its blocks' tokens and its parent's engine hash, and the router's
//! own hash of each block is computed from those (its parent's router digest
//! is remembered per engine hash). When the engine hashes with `sha256_cbor`
//! and the same seed, the two hashes are equal.
//!
//! Each block's media (vLLM reports a store and a removal per medium) make
//! its best tier (`protocol::Tier`): a change of that tier is reported as a
//! store on the new tier (a GPU copy removed while a CPU copy remains, a CPU
//! block loaded back onto the GPU); only a block gone from every medium is
//! removed.

use std::collections::HashMap;

use super::held::Held;
use protocol::Tier;
use protocol::family::{DEFAULT_FAMILY_BLOCKS, FamilyBlock, family_at};
use protocol::hashing::{BlockDigest, BlockHash, BlockHasher, ExtraKeys, LoraKey};
use protocol::index::{branch_point, is_indexed_in_run};
use protocol::kv_events::{BlockRemoved, BlockStored, EngineHash, KvEvent};

/// Why a `BlockStored` could not be translated into router hashes; its
/// blocks stay unknown to the fleet (a missed hit, never a false one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmappable {
    /// The parent block was never seen (stored before the reporter started,
    /// or lost in a gap), so the chain cannot be continued.
    #[error("parent block unknown")]
    UnknownParent,
    /// The event's block size differs from the one the fleet hashes with.
    #[error("block size {event} differs from the configured {configured}")]
    BlockSize {
        /// Block size in the event.
        event: u32,
        /// Block size the reporter was configured with.
        configured: usize,
    },
    /// `token_ids` is not `block_hashes` × `block_size` tokens long.
    #[error("{tokens} tokens for {blocks} blocks")]
    TokenCount {
        /// Tokens in the event.
        tokens: usize,
        /// Blocks in the event.
        blocks: usize,
    },
    /// A LoRA adapter whose path was not configured (`--lora name=path`).
    #[error("LoRA adapter {0:?} not configured")]
    UnknownLora(String),
    /// Multimodal or other extra keys the reporter cannot rebuild.
    #[error("unsupported extra keys")]
    ExtraKeys,
    /// The live set is at its bound.
    #[error("more than {0} live blocks")]
    Full(usize),
    /// A store without tokens (a copy to another medium, as vLLM's
    /// offloading connector reports it) of blocks this reporter does not
    /// hold on any medium: nothing to hash them from.
    #[error("{0} blocks stored without tokens are unknown")]
    UnknownCopies(usize),
}

/// The router-level changes an event caused to the indexed blocks: hashes
/// that became present or changed their best tier, and hashes that are no
/// longer held by any medium.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BlockDelta {
    /// Router hashes now held that were not, or now held on another best
    /// tier, with their families and that tier.
    pub stored: Vec<FamilyBlock>,
    /// Router hashes no longer held.
    pub removed: Vec<FamilyBlock>,
}

impl BlockDelta {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty() && self.removed.is_empty()
    }
}

/// What applying one event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Blocks were added or removed (possibly none).
    Changed,
    /// `AllBlocksCleared`: the engine's cache is empty; the fleet needs a
    /// full sync (not in the delta).
    Cleared,
    /// A `BlockStored` whose blocks could not be translated.
    Skipped(Unmappable),
    /// An event type this reporter does not know.
    Ignored,
}

#[derive(Debug, Clone)]
struct EngineBlock {
    digest: BlockDigest,
    /// 0-based position in its chain.
    depth: usize,
    /// Its prefix family (`protocol::family`).
    family: Option<BlockHash>,
    /// Media (GPU, CPU, ...) holding it; vLLM reports each separately.
    media: Vec<Option<String>>,
}

/// The engine's blocks by engine hash, and the router hashes they hold.
#[derive(Debug)]
pub struct EngineBlocks {
    hasher: BlockHasher,
    loras: HashMap<String, LoraKey>,
    blocks: HashMap<EngineHash, EngineBlock>,
    held: HashMap<BlockHash, Held>,
    max_blocks: usize,
    family_blocks: usize,
}

impl EngineBlocks {
    /// An empty set hashing like `hasher`, with LoRA adapters' paths by name
    /// (vLLM ≥ 0.31 hashes the path, which events do not carry), holding at
    /// most `max_blocks` engine blocks.
    pub fn new(hasher: BlockHasher, loras: HashMap<String, LoraKey>, max_blocks: usize) -> Self {
        EngineBlocks {
            hasher,
            loras,
            blocks: HashMap::new(),
            held: HashMap::new(),
            max_blocks,
            family_blocks: DEFAULT_FAMILY_BLOCKS,
        }
    }

    /// Computes families over `family_blocks` blocks (the fleet's
    /// `--family-blocks`) instead of the default.
    pub fn with_family_blocks(mut self, family_blocks: usize) -> Self {
        self.family_blocks = family_blocks.max(1);
        self
    }

    /// Applies one event, adding its router-level changes to `delta`.
    pub fn apply(&mut self, event: &KvEvent, delta: &mut BlockDelta) -> Applied {
        match event {
            KvEvent::BlockStored(e) => match self.stored(e, delta) {
                Ok(()) => Applied::Changed,
                Err(why) => Applied::Skipped(why),
            },
            KvEvent::BlockRemoved(e) => {
                self.removed(e, delta);
                Applied::Changed
            }
            KvEvent::AllBlocksCleared => {
                self.clear();
                Applied::Cleared
            }
            KvEvent::Unknown(_) => Applied::Ignored,
        }
    }

    /// Forgets everything (the engine restarted, or its state is unknown).
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.held.clear();
    }

    /// Every indexed router hash held, with its family and best tier, for a
    /// full sync.
    pub fn snapshot(&self) -> Vec<FamilyBlock> {
        self.held
            .iter()
            .filter(|(_, h)| h.indexed)
            .map(|(&hash, h)| h.block(hash))
            .collect()
    }

    /// Every router hash held, indexed or not.
    pub fn all_hashes(&self) -> Vec<BlockHash> {
        self.held.keys().copied().collect()
    }

    /// Number of router hashes held (indexed or not).
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    fn stored(&mut self, e: &BlockStored, delta: &mut BlockDelta) -> Result<(), Unmappable> {
        let bs = self.hasher.block_size();
        if e.block_size as usize != bs {
            return Err(Unmappable::BlockSize {
                event: e.block_size,
                configured: bs,
            });
        }
        if e.token_ids.is_empty() && !e.block_hashes.is_empty() {
            return self.copied(e, delta);
        }
        if e.token_ids.len() != e.block_hashes.len() * bs {
            return Err(Unmappable::TokenCount {
                tokens: e.token_ids.len(),
                blocks: e.block_hashes.len(),
            });
        }
        if self.blocks.len() + e.block_hashes.len() > self.max_blocks {
            return Err(Unmappable::Full(self.max_blocks));
        }
        let parent = match &e.parent_block_hash {
            None => None,
            Some(p) => Some(
                self.blocks
                    .get(p)
                    .map(|b| (b.digest, b.depth, b.family))
                    .ok_or(Unmappable::UnknownParent)?,
            ),
        };
        let keys = self.extra_keys(e, parent.is_none())?;
        let digests =
            self.hasher
                .continue_digests(parent.as_ref().map(|(d, _, _)| d), &e.token_ids, &keys);
        let start = parent.map_or(0, |(_, depth, _)| depth + 1);
        let tier = Tier::from_medium(e.medium.as_deref());
        let mut family = parent.and_then(|(_, _, f)| f);
        let run = e.block_hashes.len();
        if let (Some((digest, _, _)), Some(_)) = (parent, branch_point(start, run)) {
            self.index_held(digest.external(), delta);
        }
        for (offset, (engine, digest)) in e.block_hashes.iter().zip(digests).enumerate() {
            let depth = start + offset;
            family = family_at(depth, digest.external(), family, self.family_blocks);
            let block = self
                .blocks
                .entry(engine.clone())
                .or_insert_with(|| EngineBlock {
                    digest,
                    depth,
                    family,
                    media: Vec::new(),
                });
            let hash = block.digest.external();
            let family = block.family;
            let indexed = is_indexed_in_run(depth, offset, run);
            if block.media.contains(&e.medium) {
                // Stored again (a replayed or repeated event): it may now end
                // a run, which makes it indexed.
                if let Some(held) = self.held.get_mut(&hash)
                    && indexed
                    && !held.indexed
                {
                    held.indexed = true;
                    delta.stored.push(held.block(hash));
                }
                continue;
            }
            let first = block.media.is_empty();
            block.media.push(e.medium.clone());
            let held = self.held.entry(hash).or_insert(Held::new(family));
            if first {
                held.count += 1;
            }
            held.copy(hash, tier, true, delta);
            if first && indexed && !held.indexed {
                held.indexed = true;
                delta.stored.push(held.block(hash));
            }
        }
        Ok(())
    }

    /// A `BlockStored` without tokens: known blocks copied to another
    /// medium (vLLM's offloading connector stores to the CPU while the GPU
    /// copy still exists). They are held already; the medium keeps them
    /// held once the GPU copy is removed (then reported on the CPU tier).
    fn copied(&mut self, e: &BlockStored, delta: &mut BlockDelta) -> Result<(), Unmappable> {
        let tier = Tier::from_medium(e.medium.as_deref());
        let mut unknown = 0;
        for engine in &e.block_hashes {
            match self.blocks.get_mut(engine) {
                Some(block) if !block.media.contains(&e.medium) => {
                    block.media.push(e.medium.clone());
                    let hash = block.digest.external();
                    if let Some(held) = self.held.get_mut(&hash) {
                        held.copy(hash, tier, true, delta);
                    }
                }
                Some(_) => {}
                None => unknown += 1,
            }
        }
        if unknown > 0 {
            return Err(Unmappable::UnknownCopies(unknown));
        }
        Ok(())
    }

    /// Marks a held router hash indexed (a branch point), reporting it once.
    fn index_held(&mut self, hash: BlockHash, delta: &mut BlockDelta) {
        if let Some(held) = self.held.get_mut(&hash)
            && !held.indexed
        {
            held.indexed = true;
            delta.stored.push(held.block(hash));
        }
    }

    fn removed(&mut self, e: &BlockRemoved, delta: &mut BlockDelta) {
        let tier = Tier::from_medium(e.medium.as_deref());
        for engine in &e.block_hashes {
            let Some(block) = self.blocks.get_mut(engine) else {
                continue;
            };
            let had = block.media.len();
            block.media.retain(|m| *m != e.medium);
            let present = block.media.len() < had;
            let gone = block.media.is_empty();
            let hash = block.digest.external();
            if gone {
                self.blocks.remove(engine);
            }
            let Some(held) = self.held.get_mut(&hash) else {
                continue;
            };
            if gone {
                held.count -= 1;
                if held.count == 0 {
                    let (indexed, family) = (held.indexed, held.family);
                    self.held.remove(&hash);
                    if indexed {
                        delta.removed.push(FamilyBlock::new(hash, family));
                    }
                    continue;
                }
            }
            if present {
                held.copy(hash, tier, false, delta);
            }
        }
    }

    /// The request keys vLLM hashed these blocks with, rebuilt from the
    /// event: the LoRA adapter (path from configuration) and, on a chain's
    /// first block, a `cache_salt`. Events list extra keys untagged, one
    /// entry per block: `nil` or an array of the adapter's name, multimodal
    /// `[identifier, offset]` items and the salt.
    fn extra_keys(&self, e: &BlockStored, starts_chain: bool) -> Result<ExtraKeys, Unmappable> {
        let mut keys = ExtraKeys::default();
        if let Some(name) = &e.lora_name {
            let lora = self
                .loras
                .get(name)
                .ok_or_else(|| Unmappable::UnknownLora(name.clone()))?;
            keys.lora = Some(lora.clone());
        }
        let per_block = e.extra_keys.as_deref().unwrap_or_default();
        for (i, entry) in per_block.iter().enumerate() {
            let items: &[rmpv::Value] = match entry {
                rmpv::Value::Nil => &[],
                rmpv::Value::Array(items) => items,
                _ => return Err(Unmappable::ExtraKeys),
            };
            let mut rest = items.iter();
            if let Some(name) = &e.lora_name {
                match rest.clone().next().and_then(rmpv::Value::as_str) {
                    Some(first) if first == name => {
                        rest.next();
                    }
                    _ => {}
                }
            }
            match (rest.next(), rest.next()) {
                (None, _) => {}
                (Some(rmpv::Value::String(salt)), None) if i == 0 && starts_chain => {
                    keys.cache_salt = Some(salt.as_str().ok_or(Unmappable::ExtraKeys)?.to_owned());
                }
                _ => return Err(Unmappable::ExtraKeys),
            }
        }
        Ok(keys)
    }
}
