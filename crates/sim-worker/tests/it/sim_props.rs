//! Property tests: random operation sequences on a small `sim::PrefixCache`
//! (against a naive reference model of vLLM's block pool) and on a small
//! `sim::Engine`, checking invariants and the event stream after every step.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use proptest::prelude::*;
use protocol::hashing::BlockHash;
use sim_worker::{
    CacheError, CacheReplay, Engine, EngineConfig, EngineError, PrefillSharing, PrefixCache,
    RequestId, SimRequest, Ticket, TimeModel,
};

/// Chains of up to 5 blocks; families 0 to 2 share their first two blocks,
/// family 3 shares nothing.
fn chain(family: u64, len: usize) -> Vec<BlockHash> {
    (0..len as u64)
        .map(|i| match (family, i) {
            (3, _) => BlockHash(300 + i),
            (_, 0 | 1) => BlockHash(100 + i),
            _ => BlockHash(family * 10 + i),
        })
        .collect()
}

#[derive(Debug, Clone)]
enum CacheOp {
    Alloc {
        id: u64,
        family: u64,
        len: usize,
        extra: usize,
    },
    Commit(u64),
    Free(u64),
    Reset,
}

fn cache_op() -> impl Strategy<Value = CacheOp> {
    prop_oneof![
        4 => (0..5u64, 0..4u64, 0..6usize, 0..3usize)
            .prop_map(|(id, family, len, extra)| CacheOp::Alloc { id, family, len, extra }),
        3 => (0..5u64).prop_map(CacheOp::Commit),
        3 => (0..5u64).prop_map(CacheOp::Free),
        1 => Just(CacheOp::Reset),
    ]
}

/// vLLM's block pool written the obvious way: O(capacity) vectors.
struct Model {
    refs: Vec<u32>,
    hash: Vec<Option<BlockHash>>,
    free: Vec<usize>,
    held: HashMap<u64, (Vec<usize>, Vec<BlockHash>, bool)>,
}

impl Model {
    fn new(n: usize) -> Self {
        Model {
            refs: vec![0; n],
            hash: vec![None; n],
            free: (0..n).collect(),
            held: HashMap::new(),
        }
    }

    fn block_of(&self, h: BlockHash) -> Option<usize> {
        self.hash.iter().position(|&x| x == Some(h))
    }

    fn alloc(&mut self, id: u64, hashes: &[BlockHash], n: usize) -> bool {
        let hits: Vec<usize> = hashes.iter().map_while(|&h| self.block_of(h)).collect();
        let revived = hits.iter().filter(|&&b| self.refs[b] == 0).count();
        if n - hits.len() > self.free.len() - revived {
            return false;
        }
        for &b in &hits {
            self.free.retain(|&f| f != b);
            self.refs[b] += 1;
        }
        let mut blocks = hits;
        while blocks.len() < n {
            let b = self.free.remove(0);
            self.hash[b] = None;
            self.refs[b] = 1;
            blocks.push(b);
        }
        self.held.insert(id, (blocks, hashes.to_vec(), false));
        true
    }

    fn commit(&mut self, id: u64) {
        let Some((blocks, hashes, done)) = self.held.get(&id).cloned() else {
            return;
        };
        if !done {
            for (&b, &h) in blocks.iter().zip(&hashes) {
                if self.hash[b].is_none() && self.block_of(h).is_none() {
                    self.hash[b] = Some(h);
                }
            }
        }
        self.held.insert(id, (blocks, hashes, true));
    }

    fn release(&mut self, id: u64) {
        for b in self
            .held
            .remove(&id)
            .map(|h| h.0)
            .unwrap_or_default()
            .into_iter()
            .rev()
        {
            self.refs[b] -= 1;
            if self.refs[b] == 0 {
                self.free.push(b);
            }
        }
    }

    fn eviction_order(&self) -> Vec<BlockHash> {
        self.free.iter().filter_map(|&b| self.hash[b]).collect()
    }

    fn cached(&self) -> Vec<BlockHash> {
        let mut v: Vec<BlockHash> = self.hash.iter().flatten().copied().collect();
        v.sort_unstable();
        v
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn cache_matches_the_reference_model(
        capacity in 1..8usize,
        ops in prop::collection::vec(cache_op(), 1..60),
    ) {
        let mut cache = PrefixCache::new(capacity, 16).unwrap().with_audit();
        let mut model = Model::new(capacity);
        let mut replay = CacheReplay::new();
        for op in ops {
            match op {
                CacheOp::Alloc { id, family, len, extra } => {
                    let hashes = chain(family, len);
                    let before = (cache.stats(), cache.eviction_order(), cache.pending_events());
                    let n = len + extra;
                    match cache.allocate(RequestId(id), &hashes, n) {
                        Ok(_) => prop_assert!(model.alloc(id, &hashes, n)),
                        Err(CacheError::DuplicateRequest(_)) => {
                            prop_assert!(model.held.contains_key(&id));
                        }
                        Err(CacheError::TooLarge { .. }) => prop_assert!(n > capacity),
                        Err(CacheError::OutOfBlocks { .. }) => {
                            prop_assert!(!model.held.contains_key(&id));
                            prop_assert!(!model.alloc(id, &hashes, n));
                            let after =
                                (cache.stats(), cache.eviction_order(), cache.pending_events());
                            prop_assert_eq!(before, after);
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                CacheOp::Commit(id) => {
                    prop_assert_eq!(cache.commit(RequestId(id)).is_ok(), model.held.contains_key(&id));
                    model.commit(id);
                }
                CacheOp::Free(id) => {
                    prop_assert_eq!(cache.free(RequestId(id)).is_ok(), model.held.contains_key(&id));
                    model.release(id);
                }
                CacheOp::Reset => {
                    cache.reset();
                    model.hash.iter_mut().for_each(|h| *h = None);
                }
            }
            for event in cache.drain_events() {
                prop_assert_eq!(replay.apply(&event), Ok(()));
            }
            cache.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(replay.sorted(), cache.cached_hashes());
            prop_assert_eq!(cache.cached_hashes(), model.cached());
            prop_assert_eq!(cache.eviction_order(), model.eviction_order());
            prop_assert_eq!(cache.stats().free_blocks, model.free.len());
        }
    }
}

#[derive(Debug, Clone)]
enum EngineOp {
    Submit {
        id: u64,
        family: u64,
        prompt: usize,
        output: usize,
    },
    Advance(u64),
    Abort(u64),
    Reset,
}

fn engine_op() -> impl Strategy<Value = EngineOp> {
    prop_oneof![
        5 => (0..8u64, 0..4u64, 1..24usize, 1..6usize)
            .prop_map(|(id, family, prompt, output)| EngineOp::Submit { id, family, prompt, output }),
        4 => (0..40u64).prop_map(EngineOp::Advance),
        2 => (0..8u64).prop_map(EngineOp::Abort),
        1 => Just(EngineOp::Reset),
    ]
}

const BS: usize = 4;

fn time_model(cost_free: bool) -> TimeModel {
    if cost_free {
        return TimeModel {
            prefill_per_token: Duration::ZERO,
            prefill_per_cached_token: Duration::ZERO,
            request_overhead: Duration::ZERO,
            decode_per_token: Duration::ZERO,
            time_scale: 1.0,
        };
    }
    TimeModel {
        prefill_per_token: Duration::from_millis(1),
        prefill_per_cached_token: Duration::from_micros(50),
        request_overhead: Duration::from_millis(1),
        decode_per_token: Duration::from_millis(3),
        time_scale: 0.5,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn engine_keeps_invariants_fifo_order_and_timing(
        num_blocks in 2..12usize,
        max_num_seqs in 1..4usize,
        cost_free in prop::bool::weighted(0.15),
        ops in prop::collection::vec(engine_op(), 1..80),
    ) {
        let time = time_model(cost_free);
        let config = EngineConfig {
            time, max_num_seqs, num_blocks, block_size: BS, family_blocks: 1,
            prefill: PrefillSharing::Parallel,
        };
        let mut engine = Engine::new(config).unwrap().with_audit();
        let mut replay = CacheReplay::new();
        let mut queue: VecDeque<RequestId> = VecDeque::new();
        let (mut clock, mut accepted, mut admissions) = (Duration::ZERO, 0, Vec::new());
        let check_timing = |a: &sim_worker::Admission| {
            a.cached_tokens.is_multiple_of(BS)
                && a.cached_tokens < a.prompt_tokens
                && a.prefill_time() == time.prefill(a.uncached_tokens(), a.cached_tokens)
                && a.done_at - a.first_token_at == time.decode_all(a.output_tokens)
        };
        for op in ops {
            match op {
                EngineOp::Submit { id, family, prompt, output } => {
                    let req = SimRequest {
                        id: RequestId(id),
                        block_hashes: chain(family, (prompt / BS).min(5)),
                        prompt_tokens: prompt,
                        output_tokens: output,
                    };
                    match engine.submit(req, clock) {
                        Ok(Ticket::Admitted(a)) => {
                            prop_assert!(queue.is_empty());
                            prop_assert_eq!(a.admitted_at, clock);
                            admissions.push(a);
                            accepted += 1;
                        }
                        Ok(Ticket::Queued { position }) => {
                            prop_assert_eq!(position, queue.len());
                            queue.push_back(RequestId(id));
                            accepted += 1;
                        }
                        Err(EngineError::DuplicateRequest(_) | EngineError::TooLarge { .. }) => {}
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                EngineOp::Advance(ms) => {
                    clock += Duration::from_millis(ms);
                    engine.advance(clock);
                }
                EngineOp::Abort(id) => {
                    let id = RequestId(id);
                    let was_waiting = engine.is_waiting(id);
                    if engine.abort(id, clock).is_ok() && was_waiting {
                        queue.retain(|&q| q != id);
                    }
                }
                EngineOp::Reset => engine.reset_prefix_cache(clock),
            }
            for a in engine.take_admitted() {
                prop_assert_eq!(queue.pop_front(), Some(a.id), "FIFO admission");
                admissions.push(a);
            }
            for a in admissions.drain(..) {
                prop_assert!(check_timing(&a), "timing of {:?}", a);
            }
            for event in engine.drain_cache_events() {
                prop_assert_eq!(replay.apply(&event), Ok(()));
            }
            engine.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(replay.sorted(), engine.cache().cached_hashes());
            prop_assert_eq!(engine.gauges().num_requests_waiting, queue.len());
        }
        // Everything accepted eventually leaves, and the pool empties.
        while let Some(t) = engine.next_event_time() {
            engine.advance(t);
            engine.check_invariants().map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let g = engine.gauges();
        prop_assert_eq!((g.num_requests_running, g.num_requests_waiting), (0, 0));
        prop_assert_eq!(g.kv_cache_usage_perc, 0.0);
        let c = engine.counters();
        prop_assert_eq!(c.submitted, accepted);
        prop_assert_eq!(c.completed + c.aborted, accepted);
    }
}
