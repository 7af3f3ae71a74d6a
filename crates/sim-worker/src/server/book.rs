//! [`TokenBook`]: the token ids behind the block hashes of live requests,
//! so that a KV `BlockStored` event can carry its blocks' `token_ids` as
//! vLLM's does ([`CacheEvent`](crate::CacheEvent) has only hashes).
//!
//! A hash is stored when the prefill of a request that holds it completes,
//! so a request's blocks are needed until its events are published: the
//! driver publishes events before it releases finished requests. Memory is
//! bounded by the live requests' prompts.

use std::collections::HashMap;
use std::sync::Arc;

use crate::RequestId;
use protocol::hashing::BlockHash;

#[derive(Debug)]
struct Entry {
    /// The whole prompt of one request holding the block (every holder's
    /// tokens are equal up to the block's end: the hashes are chained).
    tokens: Arc<[u32]>,
    /// That prompt's full blocks' hashes.
    hashes: Arc<[BlockHash]>,
    /// The block's index in that prompt.
    index: usize,
    /// Live requests holding it.
    refs: usize,
}

/// Block tokens of live requests; see the module docs.
#[derive(Debug)]
pub struct TokenBook {
    block_size: usize,
    blocks: HashMap<BlockHash, Entry>,
    requests: HashMap<RequestId, Vec<BlockHash>>,
}

impl TokenBook {
    /// An empty book for blocks of `block_size` tokens.
    pub fn new(block_size: usize) -> Self {
        TokenBook {
            block_size: block_size.max(1),
            blocks: HashMap::new(),
            requests: HashMap::new(),
        }
    }

    /// Records request `id`'s prompt and its full blocks' hashes.
    pub fn register(&mut self, id: RequestId, tokens: Arc<[u32]>, hashes: &[BlockHash]) {
        let all: Arc<[BlockHash]> = Arc::from(hashes);
        for (index, &h) in hashes.iter().enumerate() {
            self.blocks
                .entry(h)
                .or_insert_with(|| Entry {
                    tokens: Arc::clone(&tokens),
                    hashes: Arc::clone(&all),
                    index,
                    refs: 0,
                })
                .refs += 1;
        }
        self.requests.insert(id, hashes.to_vec());
    }

    /// Forgets request `id` (it finished, was aborted or refused).
    pub fn release(&mut self, id: RequestId) {
        for h in self.requests.remove(&id).unwrap_or_default() {
            if let Some(entry) = self.blocks.get_mut(&h) {
                entry.refs -= 1;
                if entry.refs == 0 {
                    self.blocks.remove(&h);
                }
            }
        }
    }

    /// Whether a live request holds block `hash`.
    pub fn holds(&self, hash: BlockHash) -> bool {
        self.blocks.contains_key(&hash)
    }

    /// Where block `hash` is in a live request's prompt: that prompt's
    /// tokens, its full blocks' hashes, and the block's index.
    pub fn position(&self, hash: BlockHash) -> Option<(&[u32], &[BlockHash], usize)> {
        let e = self.blocks.get(&hash)?;
        Some((&e.tokens, &e.hashes, e.index))
    }

    /// The tokens of the blocks `hashes`, concatenated; `None` if one is
    /// unknown.
    pub fn tokens(&self, hashes: &[BlockHash]) -> Option<Vec<u32>> {
        let mut out = Vec::with_capacity(hashes.len() * self.block_size);
        for h in hashes {
            let entry = self.blocks.get(h)?;
            let start = entry.index * self.block_size;
            out.extend_from_slice(entry.tokens.get(start..start + self.block_size)?);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_live_as_long_as_a_request_holds_them() {
        let mut book = TokenBook::new(2);
        let a: Arc<[u32]> = Arc::from(vec![1, 2, 3, 4, 5]);
        let b: Arc<[u32]> = Arc::from(vec![1, 2, 9, 9]);
        let (h1, h2, h3) = (BlockHash(1), BlockHash(2), BlockHash(3));
        book.register(RequestId(1), a, &[h1, h2]);
        book.register(RequestId(2), b, &[h1, h3]);
        assert_eq!(book.tokens(&[h1, h2]), Some(vec![1, 2, 3, 4]));
        assert_eq!(book.tokens(&[h3]), Some(vec![9, 9]));
        book.release(RequestId(1));
        assert_eq!(book.tokens(&[h1, h3]), Some(vec![1, 2, 9, 9]));
        assert_eq!(book.tokens(&[h2]), None);
        book.release(RequestId(2));
        book.release(RequestId(2));
        assert!(book.requests.is_empty() && book.blocks.is_empty());
    }
}
