//! Block batches: speculative claims, confirmations (stored), evictions.

use super::ttl::ms;
use super::{
    InFlight, Lane, ScriptName, StateError, StateStore, check_name, chunks_or_empty, hex_args,
    unknown_worker,
};
use protocol::Tier;
use protocol::hashing::BlockHash;
use protocol::index::indexed_positions;

/// The indexed blocks of `chain` at positions `from` and after.
fn indexed_from(chain: &[BlockHash], from: usize) -> Vec<BlockHash> {
    indexed_positions(chain.len())
        .filter(|&p| p >= from)
        .map(|p| chain[p])
        .collect()
}

/// A tier as `stored.lua` takes it: the kind of its confirmed entries.
pub(crate) fn tier_arg(tier: Tier) -> &'static str {
    match tier {
        Tier::Gpu => "c",
        Tier::Cpu => "h",
        Tier::Disk => "d",
    }
}

/// What a `stored` batch changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredOutcome {
    /// Entries that did not exist.
    pub inserted: u64,
    /// Speculative entries now confirmed.
    pub promoted: u64,
    /// Confirmed entries whose expiry was pushed back (and whose tier is
    /// now the one reported).
    pub refreshed: u64,
}

impl StateStore {
    pub(crate) fn check_batch(
        &self,
        worker_id: &str,
        hashes: &[BlockHash],
    ) -> Result<(), StateError> {
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

    /// Speculatively inserts the blocks `worker_id` does not hold yet.
    /// Returns how many were inserted.
    pub async fn claim(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
    ) -> Result<u64, StateError> {
        self.claim_in_parts(model, worker_id, hashes, "", 0).await
    }

    /// The routing step's write: claims the request's blocks for the chosen
    /// worker and counts the request in flight, atomically in the first call
    /// (without prefill tokens: see [`assign_prefix`](Self::assign_prefix)).
    pub async fn assign(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
    ) -> Result<u64, StateError> {
        let router = self.router_id().to_owned();
        self.claim_in_parts(model, worker_id, hashes, &router, 0)
            .await
    }

    /// Speculatively claims for `worker_id` the indexed blocks of `chain`
    /// (`protocol::index`) from block `from` on: what routing writes for
    /// the part of a prompt the worker does not hold yet. On a sharded
    /// model, in the part that routes `chain`.
    pub async fn claim_prefix(
        &self,
        model: &str,
        worker_id: &str,
        chain: &[BlockHash],
        from: usize,
    ) -> Result<u64, StateError> {
        let part = self.route_part(model, chain)?;
        self.claim_as(&part, worker_id, &indexed_from(chain, from), "", 0)
            .await
    }

    /// [`assign`](Self::assign) of the indexed blocks of `chain` from block
    /// `from` on: claims them and counts the request in flight with the
    /// `prefill_tokens` the worker will compute (in the routing part with
    /// the claim, then in the others).
    pub async fn assign_prefix(
        &self,
        model: &str,
        worker_id: &str,
        chain: &[BlockHash],
        from: usize,
        prefill_tokens: u64,
    ) -> Result<u64, StateError> {
        let part = self.route_part(model, chain)?;
        let router = self.router_id().to_owned();
        let indexed = indexed_from(chain, from);
        let n = self
            .claim_as(&part, worker_id, &indexed, &router, prefill_tokens)
            .await?;
        let delta = InFlight {
            requests: 1,
            prefill_tokens: i64::try_from(prefill_tokens).unwrap_or(i64::MAX),
        };
        self.count_in_other_parts(model, &part, worker_id, delta)
            .await?;
        Ok(n)
    }

    /// Claims (and with `router`, counts) in every part of `model`: without
    /// a chain, the blocks' families are unknown.
    async fn claim_in_parts(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
        router: &str,
        prefill_tokens: u64,
    ) -> Result<u64, StateError> {
        let parts = self.parts(model)?;
        let mut inserted = 0;
        for part in parts.iter() {
            inserted += self
                .claim_as(part, worker_id, hashes, router, prefill_tokens)
                .await?;
        }
        if !router.is_empty() {
            self.lease_if_new(model).await;
        }
        Ok(inserted)
    }

    /// Claims in one part; with `router`, counts the request and its
    /// `prefill_tokens` in flight in the first call.
    async fn claim_as(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
        router: &str,
        prefill_tokens: u64,
    ) -> Result<u64, StateError> {
        self.check_batch(worker_id, hashes)?;
        let ttl = ms(self.ttls().speculative);
        let tokens = i64::try_from(prefill_tokens).unwrap_or(i64::MAX);
        let tokens_arg = tokens.to_string();
        let mut inserted = 0;
        for (i, chunk) in chunks_or_empty(hashes, self.limits().hashes_per_call).enumerate() {
            let counted = if i == 0 { router } else { "" };
            let n: u64 = self
                .blocks_call(
                    Lane::Hot,
                    ScriptName::Claim,
                    model,
                    worker_id,
                    &[&ttl, counted, &tokens_arg],
                    chunk,
                )
                .await?;
            inserted += n;
            if i == 0 && !router.is_empty() {
                let delta = InFlight {
                    requests: 1,
                    prefill_tokens: tokens,
                };
                self.inner.ledger.add(model, worker_id, delta);
            }
        }
        metrics::counter!("prefix_router_entries_total", "op" => "claim").increment(inserted);
        Ok(inserted)
    }

    /// Confirms blocks `worker_id` now caches on its GPU, with the confirmed
    /// TTL.
    pub async fn stored(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
    ) -> Result<StoredOutcome, StateError> {
        self.stored_in_families(model, worker_id, hashes, None, Tier::Gpu)
            .await
    }

    /// [`stored`](Self::stored) of blocks whose best copy is on `tier`: an
    /// entry of another tier takes this one (a demotion to the CPU, a load
    /// back onto the GPU).
    pub async fn stored_on(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
        tier: Tier,
    ) -> Result<StoredOutcome, StateError> {
        self.stored_in_families(model, worker_id, hashes, None, tier)
            .await
    }

    /// [`stored_on`](Self::stored_on) with each block's family
    /// (`protocol::family`), so that each goes only to its part.
    pub async fn stored_in_families(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
        families: Option<&[Option<BlockHash>]>,
        tier: Tier,
    ) -> Result<StoredOutcome, StateError> {
        let ttl = ms(self.ttls().confirmed);
        let kind = tier_arg(tier);
        let replies: Vec<(u64, u64, u64)> = self
            .batch(
                Lane::Bulk,
                ScriptName::Stored,
                (model, families),
                worker_id,
                &[&ttl, kind],
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
        self.evict_in_families(model, worker_id, hashes, None).await
    }

    /// [`evict`](Self::evict) with each block's family.
    pub async fn evict_in_families(
        &self,
        model: &str,
        worker_id: &str,
        hashes: &[BlockHash],
        families: Option<&[Option<BlockHash>]>,
    ) -> Result<u64, StateError> {
        let replies: Vec<u64> = self
            .batch(
                Lane::Bulk,
                ScriptName::Evict,
                (model, families),
                worker_id,
                &[],
                hashes,
            )
            .await?;
        let removed = replies.iter().sum();
        metrics::counter!("prefix_router_entries_total", "op" => "evict").increment(removed);
        Ok(removed)
    }

    /// Checks the batch, splits it by part (by the blocks' families), then
    /// runs `script` once per chunk of each part's hashes. An empty batch
    /// still runs once, in the first part, to check the worker.
    async fn batch<T: redis::FromRedisValue>(
        &self,
        lane: Lane,
        script: ScriptName,
        (model, families): (&str, Option<&[Option<BlockHash>]>),
        worker_id: &str,
        extra: &[&str],
        hashes: &[BlockHash],
    ) -> Result<Vec<T>, StateError> {
        self.check_batch(worker_id, hashes)?;
        let parts = self.parts(model)?;
        let mut replies = Vec::new();
        for (s, blocks) in self.split(parts.len(), hashes, families) {
            if blocks.is_empty() && !(hashes.is_empty() && s == 0) {
                continue;
            }
            for chunk in chunks_or_empty(&blocks, self.limits().hashes_per_call) {
                replies.push(
                    self.blocks_call(lane, script, &parts[s], worker_id, extra, chunk)
                        .await?,
                );
            }
        }
        Ok(replies)
    }

    /// One script call: ARGV = worker_id, `extra`, then the chunk's hashes.
    pub(crate) async fn blocks_call<T: redis::FromRedisValue>(
        &self,
        lane: Lane,
        script: ScriptName,
        model: &str,
        worker_id: &str,
        extra: &[&str],
        chunk: &[BlockHash],
    ) -> Result<T, StateError> {
        let hex = hex_args(chunk);
        let mut args: Vec<&str> = Vec::with_capacity(chunk.len() + extra.len() + 1);
        args.push(worker_id);
        args.extend_from_slice(extra);
        args.extend(hex.iter().map(String::as_str));
        self.run(lane, script, model, &args)
            .await
            .map_err(|e| unknown_worker(e, model, worker_id))
    }
}
