//! Admission and departure: validating a request, reserving its blocks,
//! computing its schedule, and admitting the waiting queue in FIFO order.

use std::cmp::Reverse;
use std::collections::HashSet;
use std::time::Duration;

use super::{
    Admission, Engine, EngineError, FinishReason, Finished, KvSource, Phase, PrefillSharing,
    Running, SimRequest, Timed,
};
use crate::RequestId;
use crate::cache::CacheError;
use protocol::hashing::BlockHash;

impl Engine {
    /// Refuses a request that is a duplicate, malformed or too large for
    /// the pool, before anything changes.
    pub(super) fn validate(&self, req: &SimRequest) -> Result<(), EngineError> {
        let invalid = |reason| Err(EngineError::InvalidRequest { id: req.id, reason });
        if self.running.contains_key(&req.id) || self.waiting_ids.contains(&req.id) {
            return Err(EngineError::DuplicateRequest(req.id));
        }
        if req.prompt_tokens == 0 {
            return invalid("the prompt is empty");
        }
        if req.output_tokens == 0 {
            return invalid("at least one output token is required");
        }
        if req.block_hashes.len() > req.prompt_tokens / self.config.block_size {
            return invalid("more block hashes than full prompt blocks");
        }
        let mut seen = HashSet::with_capacity(req.block_hashes.len());
        if !req.block_hashes.iter().all(|h: &BlockHash| seen.insert(*h)) {
            return invalid("a block hash appears twice");
        }
        let blocks = self.blocks_for(req);
        if blocks > self.cache.capacity() {
            return Err(EngineError::TooLarge {
                id: req.id,
                blocks,
                capacity: self.cache.capacity(),
            });
        }
        Ok(())
    }

    /// Blocks reserved for the KV of `prompt + output − 1` tokens.
    pub(super) fn blocks_for(&self, req: &SimRequest) -> usize {
        let kv_tokens = req
            .prompt_tokens
            .saturating_add(req.output_tokens.saturating_sub(1));
        kv_tokens
            .div_ceil(self.config.block_size)
            .max(req.block_hashes.len())
    }

    /// Admits `req` at `at` if a slot and its blocks are free (`Ok(None)`
    /// otherwise), scheduling its prefill completion and completion.
    pub(super) fn try_admit(
        &mut self,
        req: &SimRequest,
        source: KvSource,
        submitted_at: Duration,
        at: Duration,
    ) -> Result<Option<Admission>, CacheError> {
        if self.running.len() >= self.config.max_num_seqs {
            return Ok(None);
        }
        let alloc = match self
            .cache
            .allocate(req.id, &req.block_hashes, self.blocks_for(req))
        {
            Ok(alloc) => alloc,
            Err(CacheError::OutOfBlocks { .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        // Like vLLM, the last prompt token is always computed (its logits
        // are needed), so a fully cached prompt still recomputes a block.
        let bs = self.config.block_size;
        let prompt = req.prompt_tokens;
        let cap = (prompt - 1) / bs;
        let cached_tokens = alloc.hit_blocks.min(cap) * bs;
        let cpu_tokens = (alloc.hit_blocks + alloc.cpu_hit_blocks).min(cap) * bs - cached_tokens;
        let time = &self.config.time;
        let mut transfer = self.transfer.cpu(alloc.cpu_hit_blocks, bs);
        let (remote_tokens, compute) = match source {
            KvSource::Local => {
                let reused = cached_tokens + cpu_tokens;
                (0, time.prefill(prompt - reused, reused))
            }
            KvSource::RemotePrefill => {
                // Every prompt block not held here, the partial one too.
                let pulled = prompt
                    .div_ceil(bs)
                    .saturating_sub(alloc.hit_blocks + alloc.cpu_hit_blocks);
                transfer += self.transfer.remote(pulled, bs);
                (
                    prompt - 1 - cached_tokens - cpu_tokens,
                    time.prefill(1, prompt - 1),
                )
            }
        };
        // Transfers do not hold the prefill compute (vLLM waits for remote
        // KV outside the running batch).
        let ready = at.saturating_add(time.scale(transfer));
        let prefill_from = match self.config.prefill {
            PrefillSharing::Serial => ready.max(self.prefill_busy_until),
            PrefillSharing::Parallel => ready,
        };
        let first_token_at = prefill_from.saturating_add(compute);
        if self.config.prefill == PrefillSharing::Serial {
            self.prefill_busy_until = first_token_at;
        }
        let done_at = first_token_at.saturating_add(time.decode_all(req.output_tokens));
        let admission = Admission {
            id: req.id,
            prompt_tokens: req.prompt_tokens,
            output_tokens: req.output_tokens,
            cached_tokens,
            cpu_tokens,
            remote_tokens,
            submitted_at,
            admitted_at: at,
            first_token_at,
            done_at,
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.running.insert(req.id, Running { admission, seq });
        for (at, phase) in [(first_token_at, Phase::PrefillDone), (done_at, Phase::Done)] {
            let id = req.id;
            self.timeline.push(Reverse(Timed { at, phase, seq, id }));
        }
        self.counters.admitted += 1;
        self.counters.prompt_tokens += req.prompt_tokens as u64;
        self.counters.cached_tokens += cached_tokens as u64;
        self.counters.cpu_hit_tokens += cpu_tokens as u64;
        if source == KvSource::RemotePrefill {
            self.counters.remote_prefills += 1;
            self.counters.remote_tokens += remote_tokens as u64;
        }
        Ok(Some(admission))
    }

    /// Admits waiting requests in FIFO order at `at` until the head does
    /// not fit. A head the cache refuses outright (impossible after
    /// validation) is aborted rather than left to block the queue.
    pub(super) fn admit_waiting(&mut self, at: Duration) {
        while let Some(w) = self.waiting.pop_front() {
            match self.try_admit(&w.req, w.source, w.submitted_at, at) {
                Ok(Some(admission)) => {
                    self.waiting_ids.remove(&w.req.id);
                    self.admitted.push(admission);
                }
                Ok(None) => {
                    self.waiting.push_front(w);
                    break;
                }
                Err(_) => {
                    self.waiting_ids.remove(&w.req.id);
                    self.report(Finished {
                        id: w.req.id,
                        reason: FinishReason::Aborted,
                        submitted_at: w.submitted_at,
                        finished_at: at,
                        admission: None,
                    });
                }
            }
        }
    }

    /// Removes running request `id` at `at`, freeing its blocks.
    pub(super) fn finish(
        &mut self,
        id: RequestId,
        at: Duration,
        reason: FinishReason,
    ) -> Option<Finished> {
        let running = self.running.remove(&id)?;
        // Cannot fail: a running request holds its blocks.
        let _ = self.cache.free(id);
        Some(self.report(Finished {
            id,
            reason,
            submitted_at: running.admission.submitted_at,
            finished_at: at,
            admission: Some(running.admission),
        }))
    }

    pub(super) fn report(&mut self, finished: Finished) -> Finished {
        match finished.reason {
            FinishReason::Completed => self.counters.completed += 1,
            FinishReason::Aborted => self.counters.aborted += 1,
        }
        self.finished.push(finished);
        finished
    }
}
