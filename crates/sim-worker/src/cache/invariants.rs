//! [`PrefixCache::check_invariants`]: the structural checks tests run after
//! every step.

use super::PrefixCache;
use crate::InvariantViolation;

impl PrefixCache {
    /// Checks the structure: the free queue is well formed and holds exactly
    /// the blocks with ref count 0; ref counts equal the number of holders;
    /// hashes and blocks correspond one to one; and, with
    /// [`with_audit`](Self::with_audit), the events replayed from empty give
    /// exactly [`cached_hashes`](Self::cached_hashes). O(capacity).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |msg: String| Err(InvariantViolation(format!("cache: {msg}")));
        self.free.check()?;
        let mut holders = vec![0u32; self.blocks.len()];
        for (id, held) in &self.requests {
            if held.blocks.len() < held.hashes.len() {
                return fail(format!("{id} holds fewer blocks than hashes"));
            }
            for &b in &held.blocks {
                holders[b] += 1;
            }
        }
        for (b, block) in self.blocks.iter().enumerate() {
            if block.ref_cnt != holders[b] {
                return fail(format!(
                    "block {b} has ref count {} but {} holders",
                    block.ref_cnt, holders[b]
                ));
            }
            if (block.ref_cnt == 0) != self.free.contains(b) {
                return fail(format!(
                    "block {b} with ref count {} is {}in the free queue",
                    block.ref_cnt,
                    if self.free.contains(b) { "" } else { "not " }
                ));
            }
            if let Some(h) = block.hash
                && self.cached.get(&h) != Some(&b)
            {
                return fail(format!("block {b} carries {h} but the map disagrees"));
            }
        }
        let with_hash = self.blocks.iter().filter(|b| b.hash.is_some()).count();
        if with_hash != self.cached.len() {
            return fail(format!(
                "{with_hash} blocks carry a hash but {} hashes are mapped",
                self.cached.len()
            ));
        }
        if !self.cpu.is_consistent() {
            return fail("the CPU tier's LRU order and entries disagree".into());
        }
        if let Some(h) = self.cpu.hashes().find(|h| self.cached.contains_key(h)) {
            return fail(format!("{h} is cached on both the GPU and the CPU tier"));
        }
        if let Some(err) = &self.audit_error {
            return fail(format!("event stream: {err}"));
        }
        if let Some(replay) = &self.audit
            && replay.sorted() != self.cached_hashes()
        {
            return fail(format!(
                "replayed events give {} hashes, cache holds {}",
                replay.len(),
                self.cached.len()
            ));
        }
        Ok(())
    }
}
