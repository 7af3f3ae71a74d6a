//! Block batches: speculative claims, confirmations (stored), evictions.

use super::ttl::ms;
use super::{
    Lane, ScriptName, StateError, StateStore, check_name, chunks_or_empty, hex_args, unknown_worker,
};
use crate::hashing::BlockHash;

/// What a `stored` batch changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredOutcome {
    /// Entries that did not exist.
    pub inserted: u64,
    /// Speculative entries now confirmed.
    pub promoted: u64,
    /// Confirmed entries whose expiry was pushed back.
    pub refreshed: u64,
}

impl StateStore {
    fn check_batch(&self, worker_id: &str, hashes: &[BlockHash]) -> Result<(), StateError> {
        check_name("worker_id", worker_id)?;
        let max = self.limits().max_batch_hashes;
        if hashes.len() > max {
            return Err(StateError::Invalid {
                what: "block_hashes",
                detail: format!("{} hashes in one batch; at most {max}", hashes.len()),
            });
        }
        Ok(())
    }

    /// Speculatively inserts the blocks `worker_id` does not hold yet (the
    /// routing step's claim). Returns how many were inserted.
    pub async fn claim(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
    ) -> Result<u64, StateError> {
        let ttl = ms(self.ttls().speculative);
        let replies: Vec<u64> = self
            .batch(
                Lane::Hot,
                ScriptName::Claim,
                model,
                worker_id,
                Some(&ttl),
                hashes,
            )
            .await?;
        let inserted = replies.iter().sum();
        metrics::counter!("prefix_router_entries_total", "op" => "claim").increment(inserted);
        Ok(inserted)
    }

    /// Confirms blocks `worker_id` now caches, with the confirmed TTL.
    pub async fn stored(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
    ) -> Result<StoredOutcome, StateError> {
        let ttl = ms(self.ttls().confirmed);
        let replies: Vec<(u64, u64, u64)> = self
            .batch(
                Lane::Bulk,
                ScriptName::Stored,
                model,
                worker_id,
                Some(&ttl),
                hashes,
            )
            .await?;
        let mut out = StoredOutcome::default();
        for (i, p, r) in replies {
            out.inserted += i;
            out.promoted += p;
            out.refreshed += r;
        }
        metrics::counter!("prefix_router_entries_total", "op" => "stored")
            .increment(out.inserted + out.promoted + out.refreshed);
        Ok(out)
    }

    /// Removes blocks `worker_id` evicted. Returns how many entries it had.
    pub async fn evict(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
    ) -> Result<u64, StateError> {
        let replies: Vec<u64> = self
            .batch(
                Lane::Bulk,
                ScriptName::Evict,
                model,
                worker_id,
                None,
                hashes,
            )
            .await?;
        let removed = replies.iter().sum();
        metrics::counter!("prefix_router_entries_total", "op" => "evict").increment(removed);
        Ok(removed)
    }

    /// Checks the batch, then runs `script` once per chunk of hashes.
    async fn batch<T: redis::FromRedisValue>(
        &self,
        lane: Lane,
        script: ScriptName,
        model: &str,
        worker_id: &str,
        ttl: Option<&str>,
        hashes: &[BlockHash],
    ) -> Result<Vec<T>, StateError> {
        self.check_batch(worker_id, hashes)?;
        let mut replies = Vec::new();
        for chunk in chunks_or_empty(hashes, self.limits().hashes_per_call) {
            replies.push(
                self.blocks_call(lane, script, model, worker_id, ttl, chunk)
                    .await?,
            );
        }
        Ok(replies)
    }

    async fn blocks_call<T: redis::FromRedisValue>(
        &self,
        lane: Lane,
        script: ScriptName,
        model: &str,
        worker_id: &str,
        ttl: Option<&str>,
        chunk: &[BlockHash],
    ) -> Result<T, StateError> {
        let hex = hex_args(chunk);
        let mut args: Vec<&str> = Vec::with_capacity(chunk.len() + 2);
        args.push(worker_id);
        args.extend(ttl);
        args.extend(hex.iter().map(String::as_str));
        self.run(lane, script, model, &args)
            .await
            .map_err(|e| unknown_worker(e, model, worker_id))
    }
}
