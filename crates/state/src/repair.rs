//! Repair: a sync of only the digest buckets that differ. When a worker's
//! sync check finds a few buckets unequal (a lost report, a race), it sends
//! the hashes it holds in those buckets, and only they are brought in line:
//! missing blocks added (`stored.lua`), blocks it no longer holds removed
//! (`sync_repair.lua`). A bucket that differs by one block names that block
//! outright (the XOR of the two digests); only buckets that differ by more
//! are read, from the forward map's buckets that cover them (1/256 of the
//! hash space each). So k scattered changes cost O(k), and a bucket that
//! differs by more the fleet's entries in its 1/256, never O(all its
//! blocks) as a full sync or a scan of its reverse set does.
//!
//! Tiers: the digests count each block with its tier
//! (`protocol::index::digest_term`), so a lost tier change makes its bucket
//! differ too, and never names a block (its XOR is not a hash of the
//! bucket): such a bucket is read, and a block both hold on different tiers
//! is stored again on the worker's. Added blocks are stored on its tier.

use std::collections::{HashMap, HashSet};

use super::blocks::tier_arg;
use super::sync::lower_tiers;
use super::ttl::ms;
use super::{Lane, ScriptName, StateError, StateStore};
use crate::inspect::{Kind, parse_value};
use protocol::Tier;
use protocol::hashing::BlockHash;
use protocol::index::{digest_bucket, digest_term, parse_bucket_name};

pub use protocol::push::MAX_REPAIR_BUCKETS;

/// What a repair changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairOutcome {
    /// Blocks inserted or promoted from speculative.
    pub added: u64,
    /// Blocks removed.
    pub removed: u64,
    /// Blocks stored again on the worker's tier (the fleet had another).
    pub retiered: u64,
}

/// Per part, the buckets to repair, from `sync_check`'s list
/// ([`parse_bucket_name`]).
fn buckets_by_part(buckets: &[String], parts: usize) -> Result<Vec<[bool; 256]>, StateError> {
    let invalid = |detail: String| StateError::Invalid {
        what: "buckets",
        detail,
    };
    let mut out = vec![[false; 256]; parts];
    let mut count = vec![0usize; parts];
    for b in buckets {
        let (part, byte) = parse_bucket_name(b).ok_or_else(|| {
            invalid(format!(
                "{b:?}: a bucket is two hex digits, after \"<shard>:\" when sharded"
            ))
        })?;
        if part >= parts {
            return Err(invalid(format!("{b:?}: no such shard (of {parts})")));
        }
        if !out[part][byte] {
            out[part][byte] = true;
            count[part] += 1;
        }
    }
    if let Some(n) = count.iter().find(|n| **n > MAX_REPAIR_BUCKETS) {
        return Err(invalid(format!(
            "{n} buckets of one shard; at most {MAX_REPAIR_BUCKETS} (send a full sync)"
        )));
    }
    Ok(out)
}

impl StateStore {
    /// Makes `worker_id`'s blocks in `buckets` (as [`sync_check`]
    /// (Self::sync_check) lists them) exactly those of `hashes` that fall in
    /// them; other buckets are left alone. `families` as in
    /// [`stored_in_families`](Self::stored_in_families), and with each
    /// block's tier (`tiers`, None: all on the GPU), which the entries of
    /// those buckets then have. Live speculative
    /// entries stay, as in a full sync. A worker whose full sync is being
    /// applied is refused (`Unavailable`): that sync settles every bucket.
    pub async fn sync_repair(
        &self,
        model: &str,
        worker_id: &str,
        buckets: &[String],
        hashes: &[BlockHash],
        families: Option<&[Option<BlockHash>]>,
        tiers: Option<&[Tier]>,
    ) -> Result<RepairOutcome, StateError> {
        self.check_batch(worker_id, hashes)?;
        let parts = self.parts(model)?;
        let wanted = buckets_by_part(buckets, parts.len())?;
        let lower = lower_tiers(hashes, tiers)?;
        let tier_of = |h: &BlockHash| lower.get(h).copied().unwrap_or_default();
        let per_call = self.limits().hashes_per_call;
        let mut out = RepairOutcome::default();
        for (s, blocks) in self.split(parts.len(), hashes, families) {
            let want = &wanted[s];
            if !want.iter().any(|w| *w) {
                continue;
            }
            let part = &parts[s];
            let listed: HashSet<BlockHash> = blocks
                .into_iter()
                .filter(|h| want[digest_bucket(*h)])
                .collect();
            let idx = self.worker_idx(model, part, worker_id).await?;
            let mut mine = [0u64; 256];
            for h in &listed {
                mine[digest_bucket(*h)] ^= digest_term(*h, tier_of(h));
            }
            let (mut add, mut drop, scan) = self
                .single_differences(part, &idx, want, &listed, &mine)
                .await?;
            let mut retier = Vec::new();
            if scan.iter().any(|b| *b) {
                let held = self.bucket_members(part, &idx, &scan).await?;
                for h in listed.iter().filter(|h| scan[digest_bucket(**h)]) {
                    match held.get(h) {
                        None | Some(Kind::Speculative) => add.push(*h),
                        Some(Kind::Confirmed(t)) if *t != tier_of(h) => retier.push(*h),
                        Some(Kind::Confirmed(_)) => {}
                    }
                }
                drop.extend(held.keys().filter(|h| !listed.contains(*h)));
            }
            add.sort_unstable();
            drop.sort_unstable();
            retier.sort_unstable();
            let (inserted, promoted, _) =
                self.store_by_tier(part, worker_id, &add, &tier_of).await?;
            out.added += inserted + promoted;
            self.store_by_tier(part, worker_id, &retier, &tier_of)
                .await?;
            out.retiered += retier.len() as u64;
            for chunk in drop.chunks(per_call * 2) {
                let removed: u64 = self
                    .blocks_call(
                        Lane::Bulk,
                        ScriptName::SyncRepair,
                        part,
                        worker_id,
                        &[&idx],
                        chunk,
                    )
                    .await
                    .map_err(|e| match e {
                        StateError::Script { detail, .. } if detail.contains("syncing") => {
                            StateError::Unavailable("a full sync is being applied".into())
                        }
                        other => other,
                    })?;
                out.removed += removed;
            }
        }
        metrics::counter!("prefix_router_sync_repairs_total").increment(1);
        metrics::counter!("prefix_router_entries_total", "op" => "repair")
            .increment(out.added + out.removed + out.retiered);
        Ok(out)
    }

    /// `stored.lua` over `hashes` in one part, a call per tier and chunk;
    /// the summed (inserted, promoted, refreshed).
    async fn store_by_tier(
        &self,
        part: &str,
        worker_id: &str,
        hashes: &[BlockHash],
        tier_of: &impl Fn(&BlockHash) -> Tier,
    ) -> Result<(u64, u64, u64), StateError> {
        let ttl = ms(self.ttls().confirmed);
        let mut by_tier: HashMap<Tier, Vec<BlockHash>> = HashMap::new();
        for h in hashes {
            by_tier.entry(tier_of(h)).or_default().push(*h);
        }
        let mut sum = (0, 0, 0);
        for tier in Tier::ALL {
            let Some(blocks) = by_tier.get(&tier) else {
                continue;
            };
            for chunk in blocks.chunks(self.limits().hashes_per_call) {
                let (i, p, r): (u64, u64, u64) = self
                    .blocks_call(
                        Lane::Bulk,
                        ScriptName::Stored,
                        part,
                        worker_id,
                        &[&ttl, tier_arg(tier)],
                        chunk,
                    )
                    .await?;
                sum = (sum.0 + i, sum.1 + p, sum.2 + r);
            }
        }
        Ok(sum)
    }

    /// The worker's incarnation in `part`.
    async fn worker_idx(
        &self,
        model: &str,
        part: &str,
        worker_id: &str,
    ) -> Result<String, StateError> {
        let idx: Option<String> = self
            .command({
                let mut c = redis::cmd("HGET");
                c.arg(self.inner.keys.worker_ids(part)).arg(worker_id);
                c
            })
            .await?;
        idx.ok_or_else(|| StateError::UnknownWorker {
            worker_id: worker_id.to_owned(),
            model: model.to_owned(),
        })
    }

    /// The buckets that differ by one block, without reading the worker's
    /// members: the XOR of the fleet's digest and the worker's is then that
    /// block (its first byte names the bucket, as an even number of blocks'
    /// XOR would not). Returns the blocks to add and to drop found so, and
    /// the buckets left to scan. A block the worker lists is one the fleet
    /// lacks; one it does not list must be in the reverse set to be dropped.
    /// `mine` are the worker's digests of the buckets (with tiers: a block
    /// off the GPU, or a tier change, never names itself, and its bucket is
    /// scanned).
    async fn single_differences(
        &self,
        part: &str,
        idx: &str,
        want: &[bool; 256],
        listed: &HashSet<BlockHash>,
        mine: &[u64; 256],
    ) -> Result<(Vec<BlockHash>, Vec<BlockHash>, [bool; 256]), StateError> {
        let base = self.inner.keys.model_base(part);
        let buckets: Vec<usize> = (0..256).filter(|b| want[*b]).collect();
        let theirs: Vec<Option<String>> = self
            .command({
                let mut c = redis::cmd("HMGET");
                c.arg(format!("{base}:dg:{idx}"));
                for b in &buckets {
                    c.arg(format!("{b:02x}"));
                }
                c
            })
            .await?;
        let (mut add, mut scan) = (Vec::new(), [false; 256]);
        let mut gone = Vec::new();
        for (b, theirs) in buckets.iter().zip(theirs) {
            let theirs = theirs
                .and_then(|d| u64::from_str_radix(&d, 16).ok())
                .unwrap_or(0);
            let diff = BlockHash(theirs ^ mine[*b]);
            if diff.0 == 0 {
                continue; // equal again (a report arrived meanwhile)
            }
            if digest_bucket(diff) != *b {
                scan[*b] = true;
            } else if listed.contains(&diff) {
                add.push(diff);
            } else {
                gone.push(diff);
            }
        }
        let mut drop = Vec::new();
        if !gone.is_empty() {
            let held: Vec<bool> = self
                .command({
                    let mut c = redis::cmd("SMISMEMBER");
                    c.arg(format!("{base}:r:{idx}"));
                    for h in &gone {
                        c.arg(h.to_hex());
                    }
                    c
                })
                .await?;
            for (h, held) in gone.into_iter().zip(held) {
                if held {
                    drop.push(h);
                } else {
                    scan[digest_bucket(h)] = true;
                }
            }
        }
        Ok((add, drop, scan))
    }

    /// The worker's members in the `want`ed digest buckets, with their entry
    /// kinds (speculative, or confirmed on a tier), read from the forward
    /// map: a digest bucket (a hash's
    /// first byte) is 32 forward buckets (`f:<3 hex digits><0|8>`), each
    /// read whole by a pipelined `HGETALL`. So a bucket costs the fleet's
    /// entries in 1/256 of the hash space, not a scan of the worker's whole
    /// reverse set (the forward map and the reverse set hold the same
    /// entries: docs/state.md "Invariants").
    async fn bucket_members(
        &self,
        part: &str,
        idx: &str,
        want: &[bool; 256],
    ) -> Result<HashMap<BlockHash, Kind>, StateError> {
        let me: u64 = idx.parse().map_err(|_| StateError::Invalid {
            what: "incarnation",
            detail: format!("{idx:?} is not a number"),
        })?;
        let base = self.inner.keys.model_base(part);
        let mut held = HashMap::new();
        for b in (0..256).filter(|b| want[*b]) {
            let mut pipe = redis::pipe();
            for key in forward_buckets(b) {
                pipe.hgetall(format!("{base}:f:{key}"));
            }
            let buckets: Vec<Vec<(String, Vec<u8>)>> = self
                .inner
                .conns
                .with_bulk(|mut c| async move {
                    pipe.query_async(&mut c)
                        .await
                        .map_err(|e| StateError::from_redis("forward buckets", e))
                })
                .await?;
            for (field, value) in buckets.iter().flatten() {
                let Some(entry) = parse_value(value).entries.get(&me).copied() else {
                    continue;
                };
                let Ok(h) = field.parse::<BlockHash>() else {
                    continue; // not a hash: inspect --check reports it
                };
                held.insert(h, entry.kind);
            }
        }
        Ok(held)
    }
}

/// The forward buckets (docs/state.md "Forward map entries": a hash's first
/// four hex digits, the fourth rounded down to 0 or 8) of digest bucket `b`.
fn forward_buckets(b: usize) -> impl Iterator<Item = String> {
    (0..32usize).map(move |i| format!("{:04x}", (b << 8) | (i << 3)))
}

#[cfg(test)]
#[path = "repair_tests.rs"]
mod tests;
