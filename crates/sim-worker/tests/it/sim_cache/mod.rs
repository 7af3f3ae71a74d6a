//! `sim::PrefixCache`: capacity, LRU eviction, pinning, tail-first freeing
//! and the exactness of its event stream.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;
use sim_worker::{CacheError, CacheEvent, CacheReplay, PrefixCache, RequestId};

mod anchors;
mod basics;
mod events;
mod eviction;

const BS: usize = 16;

fn h(n: u64) -> BlockHash {
    BlockHash(n)
}

fn hs(ns: &[u64]) -> Vec<BlockHash> {
    ns.iter().map(|&n| h(n)).collect()
}

fn unplaced(ns: &[u64]) -> Vec<FamilyBlock> {
    ns.iter().map(|&n| FamilyBlock::unplaced(h(n))).collect()
}

/// `events` with their families dropped, for tests about hashes (families
/// have their own test).
fn plain(events: Vec<CacheEvent>) -> Vec<CacheEvent> {
    let strip = |v: &mut Vec<FamilyBlock>| v.iter_mut().for_each(|b| b.family = None);
    events
        .into_iter()
        .map(|mut e| {
            match &mut e {
                CacheEvent::Stored { indexed, .. } | CacheEvent::Removed { indexed, .. } => {
                    strip(indexed)
                }
                CacheEvent::Cleared => {}
            }
            e
        })
        .collect()
}

fn cache(capacity: usize) -> PrefixCache {
    PrefixCache::new(capacity, BS).unwrap().with_audit()
}

/// Allocates, computes and finishes a request: its full blocks end up
/// cached and free.
fn run(c: &mut PrefixCache, id: u64, chain: &[u64], blocks: usize) {
    let id = RequestId(id);
    c.allocate(id, &hs(chain), blocks).unwrap();
    c.commit(id).unwrap();
    c.free(id).unwrap();
    c.check_invariants().unwrap();
}
