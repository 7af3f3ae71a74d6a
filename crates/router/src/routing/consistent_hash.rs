//! [`ConsistentHash`]: the same prefix always goes to the same worker.

use super::bounded_load::{DEFAULT_LOAD_SLACK, capacity, within};
use super::{Candidate, Policy, RouteRequest};

/// Rendezvous (highest random weight) hashing of the prompt's first block
/// over worker ids, with bounded loads: stable under worker churn, no shared
/// state needed; a worker over the load bound passes its keys to the next.
/// It is also the router's fallback when Valkey cannot be reached.
#[derive(Debug, Clone, Copy)]
pub struct ConsistentHash {
    epsilon: f64,
}

impl ConsistentHash {
    /// Bounded by (1 + `epsilon`) × the mean load.
    pub fn new(epsilon: f64) -> Self {
        ConsistentHash { epsilon }
    }
}

/// SplitMix64 of the key mixed with the worker id's FNV-1a hash.
fn weight(key: u64, worker_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in worker_id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = key ^ h;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Policy for ConsistentHash {
    fn name(&self) -> &'static str {
        "consistent_hash"
    }

    fn rank(&self, request: &RouteRequest, candidates: &[Candidate]) -> Vec<usize> {
        let cap = capacity(candidates, self.epsilon, DEFAULT_LOAD_SLACK);
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        order.sort_by_key(|&i| {
            let c = &candidates[i];
            (
                !within(c, cap),
                std::cmp::Reverse(weight(request.prefix_key, &c.worker_id)),
            )
        });
        order
    }
}

#[cfg(test)]
mod tests {
    use super::super::cand;
    use super::*;

    const CH: ConsistentHash = ConsistentHash { epsilon: 0.25 };

    #[test]
    fn an_overloaded_owner_passes_its_keys_on() {
        let c = vec![cand("w0", 0, 0), cand("w1", 0, 0)];
        let r = RouteRequest {
            prompt_tokens: 1,
            prefix_key: 42,
        };
        let owner = CH.rank(&r, &c)[0];
        let mut loaded = c.clone();
        loaded[owner].in_flight = 9;
        assert_ne!(CH.rank(&r, &loaded)[0], owner);
    }

    #[test]
    fn stable_and_minimally_disrupted_by_churn() {
        let all: Vec<Candidate> = (0..5).map(|i| cand(&format!("w{i}"), 0, 0)).collect();
        let mut moved = 0;
        for key in 0..1000u64 {
            let r = RouteRequest {
                prompt_tokens: 1,
                prefix_key: key,
            };
            let first = &all[CH.rank(&r, &all)[0]].worker_id;
            assert_eq!(first, &all[CH.rank(&r, &all)[0]].worker_id);
            // Removing w4 only moves the keys w4 owned.
            let fewer = &all[..4];
            let now = &fewer[CH.rank(&r, fewer)[0]].worker_id;
            if first != "w4" {
                assert_eq!(first, now);
            } else {
                moved += 1;
            }
        }
        assert!(moved > 100 && moved < 300, "w4 owned {moved} of 1000 keys");
    }
}
