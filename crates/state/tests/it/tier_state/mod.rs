//! KV tiers in the shared state (issue 14): entries keep each holder's best
//! tier through stores, demotions, promotions and evictions; digests count
//! tiers, so a lost tier report is found by the next sync check and fixed
//! by its repair; a full sync (also one applied while reports arrive)
//! leaves every entry on the snapshot's tier; routing weighs hits by tier.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use protocol::Tier;
use protocol::hashing::BlockHash;
use protocol::index::{digest_bucket, digests_hex, tiered_digests};
use state::{ScriptName, StateStore, StateTtls, TierBlocks};
use support::{Valkey, raw_state, register_in, store};

mod entries;
mod repair;
mod routing;
mod syncs;

const M: &str = "m";
const NS: &str = "ti";

fn ttls() -> StateTtls {
    StateTtls {
        worker_lease: Duration::from_secs(120),
        router_lease: Duration::from_secs(120),
        ..StateTtls::default()
    }
}

/// Hashes spread over the key space (and so over digest buckets).
fn spread(n: u64, salt: u64) -> Vec<BlockHash> {
    (1..=n)
        .map(|i| BlockHash((i ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect()
}

/// The entry letter worker `idx` has for `h` ('s', 'c', 'h', 'd'), if any.
fn letter(v: &Valkey, idx: &str, h: BlockHash) -> Option<char> {
    letters(v, idx)(h)
}

/// [`letter`] of many blocks from one read of the state (a read per block
/// read the whole state each time).
fn letters(v: &Valkey, idx: &str) -> impl Fn(BlockHash) -> Option<char> {
    let raw = raw_state(v, NS, M);
    let idx = idx.to_owned();
    move |h| {
        raw.forward
            .get(&h.to_hex())
            .and_then(|m| m.get(&idx).map(|(k, _)| *k))
    }
}

fn idx_of(v: &Valkey, id: &str) -> String {
    redis::Commands::hget(&mut v.conn(), format!("{NS}:{{{M}}}:ids"), id).unwrap()
}

/// `w`'s match of a one-block chain, per tier.
async fn tier_of(s: &StateStore, w: &str, h: BlockHash) -> TierBlocks {
    let l = s.probe(M, &[h]).await.unwrap();
    l.workers
        .iter()
        .find(|m| m.info.worker_id == w)
        .map(|m| m.by_tier())
        .unwrap_or_default()
}

fn one(tier: Tier) -> TierBlocks {
    TierBlocks {
        gpu: usize::from(tier == Tier::Gpu),
        cpu: usize::from(tier == Tier::Cpu),
        disk: usize::from(tier == Tier::Disk),
    }
}

/// The worker's digests: its blocks with their tiers.
fn digests_of(blocks: &BTreeMap<BlockHash, Tier>) -> String {
    digests_hex(&tiered_digests(blocks.iter().map(|(h, t)| (*h, *t))))
}

/// Calls `script` of the library on the model's part, with `args` after
/// the base (as `StateStore` would, without its retries and patching).
async fn call_script(v: &Valkey, script: ScriptName, args: &[&[u8]]) -> Vec<i64> {
    let mut c = v.client().get_multiplexed_async_connection().await.unwrap();
    support::call_script(&mut c, NS, M, script, args).await
}

/// Stages and commits `blocks` (with `tiers`) for `w` without patching.
async fn commit_unpatched(
    v: &Valkey,
    s: &StateStore,
    w: &str,
    blocks: &[BlockHash],
    tiers: &[Tier],
) -> String {
    s.sync_stage_in_families(M, w, "mid", blocks, None, Some(tiers))
        .await
        .unwrap();
    let r = call_script(
        v,
        ScriptName::SyncCommit,
        &[w.as_bytes(), b"mid", b"600000"],
    )
    .await;
    assert_eq!(r[0], 1, "committed");
    r[2].to_string()
}
