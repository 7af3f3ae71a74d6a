//! [`ChunkView`]: which of LMCache's 256-token chunks this engine's KV
//! tiers hold whole, followed from its cache events, as the admits and
//! evicts an LMCache instance beside it would send its controller.
//!
//! LMCache keeps what the engine computed (it stores each prefill's
//! chunks), so its view is the engine's GPU pool *and* CPU tier together:
//! a chunk is held while each of its blocks is cached on either tier (or
//! held by a live request, which is loading it back). A chunk is learnt
//! when a stored block completes it (its key computed from the prompt's
//! tokens in the [`TokenBook`]) and dropped when a removed block leaves it
//! held nowhere. Memory: the chunks held, plus those a lost event left
//! stale until the next sweep (once their count passes twice the tiers'
//! capacity in chunks).

use std::collections::{HashMap, HashSet};

use super::book::TokenBook;
use crate::lmcache::{CHUNK_TOKENS, ChunkOp, chunk_key, chunk_keys};
use crate::{CacheEvent, TierEvent};
use protocol::hashing::BlockHash;

#[derive(Debug)]
struct Chunk {
    key: i64,
    blocks: Vec<BlockHash>,
}

/// LMCache's chunks among the engine's cached blocks; see the module docs.
#[derive(Debug)]
pub struct ChunkView {
    blocks_per_chunk: usize,
    /// By the hash of the chunk's last block.
    chunks: HashMap<BlockHash, Chunk>,
    /// Each known chunk's blocks → the chunk's last block.
    owner: HashMap<BlockHash, BlockHash>,
    sweep_at: usize,
    base_sweep: usize,
}

impl ChunkView {
    /// A view over blocks of `block_size` tokens in tiers of
    /// `capacity_blocks` blocks in all; `None` unless a chunk is a whole
    /// number of blocks.
    pub fn new(block_size: usize, capacity_blocks: usize) -> Option<Self> {
        if block_size == 0 || !CHUNK_TOKENS.is_multiple_of(block_size) {
            return None;
        }
        let blocks_per_chunk = CHUNK_TOKENS / block_size;
        let base_sweep = 2 * capacity_blocks / blocks_per_chunk + 64;
        Some(ChunkView {
            blocks_per_chunk,
            chunks: HashMap::new(),
            owner: HashMap::new(),
            sweep_at: base_sweep,
            base_sweep,
        })
    }

    /// Chunks known to be held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Follows `events`, after which `cached(h)` says whether block `h`
    /// is cached on either tier: the chunks lost (evicts) then the chunks
    /// completed (admits).
    pub fn update(
        &mut self,
        events: &[TierEvent],
        book: &TokenBook,
        cached: &dyn Fn(BlockHash) -> bool,
    ) -> Vec<ChunkOp> {
        let held = |h: BlockHash| cached(h) || book.holds(h);
        let mut ops = Vec::new();
        let mut stored = Vec::new();
        let mut removed = Vec::new();
        let mut cleared = false;
        for TierEvent { event, .. } in events {
            match event {
                CacheEvent::Stored { hashes, .. } => stored.extend_from_slice(hashes),
                CacheEvent::Removed { hashes, .. } => removed.extend_from_slice(hashes),
                CacheEvent::Cleared => cleared = true,
            }
        }
        let lost: Vec<BlockHash> = if cleared || self.chunks.len() > self.sweep_at {
            let lost = self
                .chunks
                .iter()
                .filter(|(_, c)| !c.blocks.iter().all(|&b| held(b)));
            lost.map(|(&end, _)| end).collect()
        } else {
            let lost = removed.iter().filter(|&&h| !held(h));
            let ends: HashSet<BlockHash> =
                lost.filter_map(|h| self.owner.get(h).copied()).collect();
            ends.into_iter().collect()
        };
        for end in lost {
            if let Some(chunk) = self.chunks.remove(&end) {
                for b in &chunk.blocks {
                    self.owner.remove(b);
                }
                ops.push(ChunkOp::Evict(chunk.key));
            }
        }
        if self.chunks.len() > self.sweep_at / 2 {
            self.sweep_at = (2 * self.chunks.len()).max(self.base_sweep);
        }
        let mut seen = HashSet::new();
        for h in stored {
            if let Some(op) = self.learn(h, book, cached, &mut seen) {
                ops.push(op);
            }
        }
        ops
    }

    /// The admit of the chunk block `h` belongs to, if that chunk is new
    /// and each of its blocks cached (computed, not only allocated).
    fn learn(
        &mut self,
        h: BlockHash,
        book: &TokenBook,
        cached: &dyn Fn(BlockHash) -> bool,
        seen: &mut HashSet<BlockHash>,
    ) -> Option<ChunkOp> {
        let (tokens, hashes, index) = book.position(h)?;
        let bpc = self.blocks_per_chunk;
        let c = index / bpc;
        let blocks = hashes.get(c * bpc..(c + 1) * bpc)?;
        let end = *blocks.last()?;
        if !seen.insert(end) || self.chunks.contains_key(&end) {
            return None;
        }
        let chunk_tokens = tokens.get(c * CHUNK_TOKENS..(c + 1) * CHUNK_TOKENS)?;
        if !blocks.iter().all(|&b| cached(b)) {
            return None;
        }
        let previous = match c.checked_sub(1) {
            None => Some(0),
            Some(p) => hashes
                .get(p * bpc + bpc - 1)
                .and_then(|prev_end| self.chunks.get(prev_end))
                .map(|prev| prev.key),
        };
        let key = match previous {
            Some(prefix) => chunk_key(prefix, chunk_tokens),
            None => *chunk_keys(tokens.get(..(c + 1) * CHUNK_TOKENS)?).last()?,
        };
        let blocks = blocks.to_vec();
        for &b in &blocks {
            self.owner.insert(b, end);
        }
        self.chunks.insert(end, Chunk { key, blocks });
        Some(ChunkOp::Admit(key))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{Medium, RequestId};

    fn stored(hashes: &[BlockHash], medium: Medium) -> TierEvent {
        TierEvent {
            medium,
            event: CacheEvent::Stored {
                hashes: hashes.to_vec(),
                parent: None,
                block_size: 16,
                indexed: Vec::new(),
            },
        }
    }

    fn removed(hashes: &[BlockHash], medium: Medium) -> TierEvent {
        TierEvent {
            medium,
            event: CacheEvent::Removed {
                hashes: hashes.to_vec(),
                indexed: Vec::new(),
            },
        }
    }

    #[test]
    fn a_chunk_is_admitted_whole_kept_across_tiers_and_evicted_when_held_nowhere() {
        // 600 tokens: 37 full blocks of 16, two full chunks of 256.
        let tokens: Vec<u32> = (0..600u32).map(|i| (i * 7919 + 13) % 151_000).collect();
        let hashes: Vec<BlockHash> = (0..37u64).map(|i| BlockHash(1000 + i)).collect();
        let mut book = TokenBook::new(16);
        book.register(RequestId(1), Arc::from(tokens.clone()), &hashes);
        let mut view = ChunkView::new(16, 64).unwrap();
        let mut gpu: HashSet<BlockHash> = HashSet::new();
        let mut cpu: HashSet<BlockHash> = HashSet::new();
        let keys = chunk_keys(&tokens);

        // Half of chunk 0 cached: nothing whole yet.
        gpu.extend(&hashes[..8]);
        let ops = view.update(&[stored(&hashes[..8], Medium::Gpu)], &book, &|h| {
            gpu.contains(&h)
        });
        assert_eq!(ops, vec![]);
        // The whole prompt: both full chunks, with LMCache's own keys.
        gpu.extend(&hashes[8..]);
        let ops = view.update(&[stored(&hashes[8..], Medium::Gpu)], &book, &|h| {
            gpu.contains(&h)
        });
        assert_eq!(ops, vec![ChunkOp::Admit(keys[0]), ChunkOp::Admit(keys[1])]);
        book.release(RequestId(1));

        // Chunk 1's blocks move to the CPU tier: still held, no op.
        let moved = &hashes[16..32];
        cpu.extend(moved);
        gpu.retain(|h| !moved.contains(h));
        let both = |h: BlockHash| gpu.contains(&h) || cpu.contains(&h);
        let events = [stored(moved, Medium::Cpu), removed(moved, Medium::Gpu)];
        assert_eq!(view.update(&events, &book, &both), vec![]);
        assert_eq!(view.len(), 2);

        // One of its blocks leaves the CPU tier: chunk 1 is evicted.
        cpu.remove(&hashes[20]);
        let both = |h: BlockHash| gpu.contains(&h) || cpu.contains(&h);
        let ops = view.update(&[removed(&hashes[20..21], Medium::Cpu)], &book, &both);
        assert_eq!(ops, vec![ChunkOp::Evict(keys[1])]);

        // The pool is cleared: chunk 0 goes too.
        gpu.clear();
        cpu.clear();
        let none = |_| false;
        let cleared = TierEvent {
            medium: Medium::Gpu,
            event: CacheEvent::Cleared,
        };
        assert_eq!(
            view.update(&[cleared], &book, &none),
            vec![ChunkOp::Evict(keys[0])]
        );
        assert_eq!(view.len(), 0);
    }

    #[test]
    fn a_block_a_live_request_holds_keeps_its_chunk() {
        let tokens: Vec<u32> = (0..256u32).collect();
        let hashes: Vec<BlockHash> = (0..16u64).map(BlockHash).collect();
        let mut book = TokenBook::new(16);
        book.register(RequestId(1), Arc::from(tokens.clone()), &hashes);
        let mut view = ChunkView::new(16, 64).unwrap();
        let all = |_| true;
        let ops = view.update(&[stored(&hashes, Medium::Gpu)], &book, &all);
        assert_eq!(ops.len(), 1);
        // Loaded back from the CPU tier by a running request: not cached
        // on a tier for a moment, but held.
        let none = |_| false;
        assert_eq!(
            view.update(&[removed(&hashes[..1], Medium::Cpu)], &book, &none),
            vec![]
        );
        assert!(ChunkView::new(24, 64).is_none());
    }
}
