//! [`LookupCache`]: the controller's recent answers, by prompt, for a short
//! while and in a bounded number, so that a burst of one prompt asks once.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::reply::Held;

/// The key of a prompt: a 64-bit hash of its token ids and length.
pub fn prompt_key(tokens: &[u32]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tokens.hash(&mut h);
    h.finish()
}

/// Answers by prompt key, each kept for `ttl`, at most `capacity` at once
/// (the oldest goes first).
pub struct LookupCache {
    ttl: Duration,
    capacity: usize,
    entries: HashMap<u64, (Instant, Arc<[Held]>)>,
    /// Keys in insertion order (a key re-inserted appears twice; the stale
    /// occurrence is skipped when it comes out).
    order: VecDeque<(u64, Instant)>,
}

impl LookupCache {
    /// An empty cache.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        LookupCache {
            ttl,
            capacity: capacity.max(1),
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// The answer for `key` if younger than the TTL at `now`.
    pub fn get(&self, key: u64, now: Instant) -> Option<Arc<[Held]>> {
        self.entries
            .get(&key)
            .filter(|(at, _)| now.saturating_duration_since(*at) < self.ttl)
            .map(|(_, held)| held.clone())
    }

    /// Keeps `held` for `key` from `now`, dropping the expired and, past
    /// the capacity, the oldest entries.
    pub fn insert(&mut self, key: u64, held: Arc<[Held]>, now: Instant) {
        self.entries.insert(key, (now, held));
        self.order.push_back((key, now));
        while let Some(&(k, at)) = self.order.front() {
            let current = self.entries.get(&k).is_some_and(|(t, _)| *t == at);
            let expired = now.saturating_duration_since(at) >= self.ttl;
            if !current {
                self.order.pop_front();
            } else if expired || self.entries.len() > self.capacity {
                self.entries.remove(&k);
                self.order.pop_front();
            } else {
                break;
            }
        }
        // Re-inserted keys leave stale occurrences; never more than a few
        // times the capacity of them.
        if self.order.len() > self.capacity * 4 {
            let entries = &self.entries;
            self.order
                .retain(|(k, at)| entries.get(k).is_some_and(|(t, _)| t == at));
        }
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(n: u64) -> Arc<[Held]> {
        Arc::from(vec![Held {
            worker_id: "w".into(),
            tokens: n,
            tier: protocol::Tier::Cpu,
            location: "LocalCPUBackend".into(),
        }])
    }

    #[test]
    fn entries_expire_and_the_cache_stays_within_its_bound() {
        let t0 = Instant::now();
        let mut c = LookupCache::new(Duration::from_secs(2), 3);
        for k in 0..10u64 {
            c.insert(k, held(k), t0);
            assert!(c.len() <= 3, "{}", c.len());
        }
        assert!(c.get(9, t0).is_some() && c.get(7, t0).is_some());
        assert!(c.get(0, t0).is_none(), "the oldest went first");
        assert!(c.get(9, t0 + Duration::from_secs(2)).is_none(), "expired");
        // A key inserted again and again stays one entry, and the order
        // queue stays bounded.
        for i in 0..100 {
            c.insert(42, held(i), t0 + Duration::from_millis(i));
        }
        assert!(c.len() <= 3);
        assert!(c.order.len() <= 12, "{}", c.order.len());
        assert_eq!(
            c.get(42, t0 + Duration::from_millis(100)).unwrap()[0].tokens,
            99
        );
        // Expired entries leave when the next one comes.
        c.insert(7, held(7), t0 + Duration::from_secs(10));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn prompts_differ_by_any_token_and_by_length() {
        assert_ne!(prompt_key(&[1, 2, 3]), prompt_key(&[1, 2, 4]));
        assert_ne!(prompt_key(&[1, 2, 3]), prompt_key(&[1, 2, 3, 0]));
        assert_eq!(prompt_key(&[5; 300]), prompt_key(&[5; 300]));
    }
}
