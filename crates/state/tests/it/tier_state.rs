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

#[tokio::test]
async fn an_entry_follows_its_blocks_best_tier_until_the_last_copy_goes() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    register_in(&s, "w").await;
    let idx = idx_of(&v, "w");
    let h = spread(1, 1)[0];
    let mut worker = BTreeMap::new();
    for (tier, want) in [
        (Tier::Gpu, 'c'),
        // The GPU copy evicted, a CPU copy kept: a demotion, not an eviction.
        (Tier::Cpu, 'h'),
        (Tier::Disk, 'd'),
        // Loaded back onto the GPU.
        (Tier::Gpu, 'c'),
        (Tier::Cpu, 'h'),
    ] {
        s.stored_on(M, "w", &[h], tier).await.unwrap();
        worker.insert(h, tier);
        assert_eq!(letter(&v, &idx, h), Some(want), "{tier}");
        assert_eq!(tier_of(&s, "w", h).await, one(tier), "{tier}");
        assert_eq!(
            s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
            None
        );
    }
    // A claim does not re-claim a block held on the CPU: it stays 'h'.
    assert_eq!(s.claim(M, "w", &[h]).await.unwrap(), 0);
    assert_eq!(letter(&v, &idx, h), Some('h'));
    // Removed from its last medium: evicted, the digests empty again.
    assert_eq!(s.evict(M, "w", &[h]).await.unwrap(), 1);
    assert_eq!(letter(&v, &idx, h), None);
    assert_eq!(tier_of(&s, "w", h).await, TierBlocks::default());
    worker.clear();
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    // A speculative claim, then the worker's store on the CPU: confirmed there.
    s.claim(M, "w", &[h]).await.unwrap();
    assert_eq!(letter(&v, &idx, h), Some('s'));
    s.stored_on(M, "w", &[h], Tier::Cpu).await.unwrap();
    assert_eq!(letter(&v, &idx, h), Some('h'));
}

#[tokio::test]
async fn a_lost_demotion_is_found_by_the_next_check_and_repaired() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    register_in(&s, "w").await;
    let idx = idx_of(&v, "w");
    let blocks = spread(300, 2);
    s.stored(M, "w", &blocks).await.unwrap();
    let mut worker: BTreeMap<BlockHash, Tier> = blocks.iter().map(|h| (*h, Tier::Gpu)).collect();
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    // Three blocks move to the CPU and one is loaded back from it... but the
    // reports never arrive (a router died with them).
    let demoted = [blocks[3], blocks[77], blocks[150]];
    for h in demoted {
        worker.insert(h, Tier::Cpu);
    }
    s.stored_on(M, "w", &[blocks[200]], Tier::Cpu)
        .await
        .unwrap();
    // (that one's promotion is the lost report)
    let digests = digests_of(&worker);
    let differing = s.sync_check(M, "w", &digests).await.unwrap().unwrap();
    let mut want: Vec<String> = demoted
        .iter()
        .chain([&blocks[200]])
        .map(|h| format!("{:02x}", digest_bucket(*h)))
        .collect();
    want.sort();
    want.dedup();
    let mut got = differing.clone();
    got.sort();
    assert_eq!(got, want, "the tier changes' buckets differ, and only they");
    // The repair, as the pusher sends it: its blocks in those buckets, with
    // their tiers.
    let (listed, tiers): (Vec<BlockHash>, Vec<Tier>) = worker
        .iter()
        .filter(|(h, _)| want.contains(&format!("{:02x}", digest_bucket(**h))))
        .map(|(h, t)| (*h, *t))
        .unzip();
    let out = s
        .sync_repair(M, "w", &differing, &listed, None, Some(&tiers))
        .await
        .unwrap();
    assert_eq!((out.added, out.removed), (0, 0), "membership was right");
    assert_eq!(out.retiered, 4, "the three demotions and the promotion");
    assert_eq!(s.sync_check(M, "w", &digests).await.unwrap(), None);
    let letter = letters(&v, &idx);
    for h in demoted {
        assert_eq!(letter(h), Some('h'));
    }
    assert_eq!(letter(blocks[200]), Some('c'));
    assert_eq!(letter(blocks[0]), Some('c'));
}

#[tokio::test]
async fn a_full_sync_leaves_every_entry_on_the_snapshots_tier() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    register_in(&s, "w").await;
    let blocks = spread(120, 3);
    let tier = |i: usize| Tier::ALL[i % 3];
    let tiers: Vec<Tier> = (0..blocks.len()).map(tier).collect();
    // A fresh incarnation (or an emptied Valkey): the snapshot inserts all.
    s.sync_in_families(M, "w", &blocks, None, Some(&tiers))
        .await
        .unwrap();
    let idx = idx_of(&v, "w");
    let mut worker: BTreeMap<BlockHash, Tier> =
        blocks.iter().copied().zip(tiers.iter().copied()).collect();
    let letter = letters(&v, &idx);
    for (i, h) in blocks.iter().enumerate() {
        assert_eq!(letter(*h), Some(tier(i).entry_kind()));
    }
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    // Every tier moves one step (lost reports of all kinds: promotions,
    // demotions), a block goes and one comes: the next full snapshot puts
    // each where the worker has it.
    let mut next: Vec<BlockHash> = blocks[1..].to_vec();
    next.push(spread(1, 99)[0]);
    let next_tiers: Vec<Tier> = (0..next.len()).map(|i| tier(i + 2)).collect();
    s.sync_in_families(M, "w", &next, None, Some(&next_tiers))
        .await
        .unwrap();
    worker = next
        .iter()
        .copied()
        .zip(next_tiers.iter().copied())
        .collect();
    let letter = letters(&v, &idx);
    for (h, t) in &worker {
        assert_eq!(letter(*h), Some(t.entry_kind()), "{h}");
    }
    assert_eq!(letter(blocks[0]), None);
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    // The target's tiers are gone with the target.
    let st: bool =
        redis::Commands::exists(&mut v.conn(), format!("{NS}:{{{M}}}:st:{idx}")).unwrap();
    assert!(!st);
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

#[tokio::test]
async fn reports_during_a_sync_keep_their_tier_through_the_patch() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    register_in(&s, "w").await;
    let blocks = spread(40, 4);
    s.stored(M, "w", &blocks).await.unwrap();
    // A snapshot with every block on the CPU is committed, not patched yet.
    let cpu = vec![Tier::Cpu; blocks.len()];
    let idx = commit_unpatched(&v, &s, "w", &blocks, &cpu).await;
    // Lookups already see the snapshot's tiers (the target's).
    assert_eq!(tier_of(&s, "w", blocks[5]).await, one(Tier::Cpu));
    // Meanwhile block 5 is loaded back onto the GPU and block 6 goes to
    // disk; block 7 is evicted.
    s.stored_on(M, "w", &[blocks[5]], Tier::Gpu).await.unwrap();
    s.stored_on(M, "w", &[blocks[6]], Tier::Disk).await.unwrap();
    s.evict(M, "w", &[blocks[7]]).await.unwrap();
    assert_eq!(tier_of(&s, "w", blocks[5]).await, one(Tier::Gpu));
    // Any router's gc finishes a stalled patch; here, the patch runs now.
    while call_script(&v, ScriptName::SyncPatch, &[idx.as_bytes(), b"8"]).await[0] != 1 {}
    let mut worker: BTreeMap<BlockHash, Tier> = blocks.iter().map(|h| (*h, Tier::Cpu)).collect();
    worker.insert(blocks[5], Tier::Gpu);
    worker.insert(blocks[6], Tier::Disk);
    worker.remove(&blocks[7]);
    let letter = letters(&v, &idx);
    for (h, t) in &worker {
        assert_eq!(letter(*h), Some(t.entry_kind()), "{h}");
    }
    assert_eq!(letter(blocks[7]), None);
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn routing_prefers_a_gpu_hit_to_a_cpu_hit_and_a_cpu_hit_to_none() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    for w in ["gpu", "cpu", "none"] {
        register_in(&s, w).await;
    }
    let chain = spread(64, 5);
    s.stored_on(M, "gpu", &chain, Tier::Gpu).await.unwrap();
    // The CPU holder's first 16 blocks are still on its GPU, the rest
    // offloaded (an engine offloads a chain's tail first).
    s.stored_on(M, "cpu", &chain[..16], Tier::Gpu)
        .await
        .unwrap();
    s.stored_on(M, "cpu", &chain[16..], Tier::Cpu)
        .await
        .unwrap();
    let params = |prompt, block_size, seed| state::RouteParams {
        epsilon: 100.0,
        ..state::RouteParams::new(prompt, block_size, seed)
    };
    let prompt = 64 * 16;
    let route = |allowed: Vec<String>| {
        let s = s.clone();
        let chain = chain.clone();
        async move {
            let o = s
                .route(M, &chain, &params(prompt, 16, 11), &[], &allowed)
                .await
                .unwrap();
            let w = &o.lookup.workers[o.chosen.unwrap()];
            let cpu = o
                .lookup
                .workers
                .iter()
                .find(|w| w.info.worker_id == "cpu")
                .unwrap();
            assert_eq!(
                cpu.by_tier(),
                TierBlocks {
                    gpu: 16,
                    cpu: 48,
                    disk: 0
                },
                "the route's probes find the tiers"
            );
            (w.info.worker_id.clone(), o)
        }
    };
    let (chosen, o) = route(Vec::new()).await;
    assert_eq!(chosen, "gpu");
    s.change_in_flight(
        M,
        "gpu",
        state::InFlight {
            requests: -1,
            prefill_tokens: -(o.prefill_tokens as i64),
        },
    )
    .await
    .unwrap();
    // Without the GPU holder, the CPU holder still beats a miss, and its
    // offloaded blocks are not claimed again (a load, not a prefill).
    let (chosen, o) = route(vec!["cpu".into(), "none".into()]).await;
    assert_eq!(chosen, "cpu");
    assert_eq!(o.prefill_tokens, 0, "nothing to compute: all is cached");
    let idx = idx_of(&v, "cpu");
    assert_eq!(letter(&v, &idx, chain[40]), Some('h'));
    assert_eq!(letter(&v, &idx, chain[63]), Some('h'));
}

/// 16 hashes in each of the digest buckets 00, 5a and ff (00: a tier
/// term's first byte is 0, so a lone tier change there looks like a block
/// of its bucket to the repair's one-block shortcut), low bytes spread.
fn crowded() -> Vec<BlockHash> {
    [0x00u64, 0x5a, 0xff]
        .iter()
        .flat_map(|b| {
            (1..=16u64).map(move |i| {
                let low = (i ^ (b << 8)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8;
                BlockHash((b << 56) | low)
            })
        })
        .collect()
}

/// What a random fleet state and worker truth over `crowded` hold: per
/// hash, nothing, a claim, or a confirmed entry on a tier.
fn holding() -> impl proptest::strategy::Strategy<Value = Vec<Option<Option<Tier>>>> {
    use proptest::prelude::*;
    let one = prop_oneof![
        3 => Just(None),
        1 => Just(Some(None)),
        4 => prop::sample::select(Tier::ALL.to_vec()).prop_map(|t| Some(Some(t))),
    ];
    prop::collection::vec(one, 48)
}

#[test]
fn a_repair_of_random_tier_and_membership_drift_ends_equal() {
    use proptest::prelude::*;
    let v = Valkey::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = ProptestConfig {
        cases: support::cases(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let blocks = crowded();
    proptest!(cfg, |(fleet in holding(), truth in holding())| {
        rt.block_on(async {
            let _: () = redis::cmd("FLUSHALL").query(&mut v.conn()).unwrap();
            let s = store(&v, NS, "r1", ttls());
            register_in(&s, "w").await;
            let idx = idx_of(&v, "w");
            // The fleet's view: claims and confirmed entries per tier (one
            // call each; the blocks are distinct, so the order is moot).
            let held_as = |want: Option<Tier>| -> Vec<BlockHash> {
                blocks
                    .iter()
                    .zip(&fleet)
                    .filter(|(_, held)| **held == Some(want))
                    .map(|(h, _)| *h)
                    .collect()
            };
            let claimed = held_as(None);
            if !claimed.is_empty() {
                s.claim(M, "w", &claimed).await.unwrap();
            }
            for t in Tier::ALL {
                let stored = held_as(Some(t));
                if !stored.is_empty() {
                    s.stored_on(M, "w", &stored, t).await.unwrap();
                }
            }
            // The worker's truth: confirmed blocks on their tiers.
            let worker: BTreeMap<BlockHash, Tier> = blocks
                .iter()
                .zip(&truth)
                .filter_map(|(h, t)| Some((*h, (*t)??)))
                .collect();
            let digests = digests_of(&worker);
            let Some(differing) = s.sync_check(M, "w", &digests).await.unwrap() else {
                return;
            };
            let (listed, tiers): (Vec<BlockHash>, Vec<Tier>) =
                worker.iter().map(|(h, t)| (*h, *t)).unzip();
            s.sync_repair(M, "w", &differing, &listed, None, Some(&tiers))
                .await
                .unwrap();
            assert_eq!(
                s.sync_check(M, "w", &digests).await.unwrap(),
                None,
                "fleet {fleet:?}, worker {worker:?}"
            );
            let letter = letters(&v, &idx);
            for h in &blocks {
                let got = letter(*h);
                match worker.get(h) {
                    Some(t) => assert_eq!(got, Some(t.entry_kind()), "{h}"),
                    // Live claims stay, as in a full sync.
                    None => assert!(matches!(got, None | Some('s')), "{h}: {got:?}"),
                }
            }
        });
    });
}

#[tokio::test]
async fn a_syncing_workers_tiers_are_the_targets_for_the_route_and_the_lookup() {
    let v = Valkey::start();
    let s = store(&v, NS, "r1", ttls());
    s.router_lease(M, Duration::from_secs(120)).await.unwrap();
    register_in(&s, "w").await;
    let chain = spread(80, 8);
    s.stored_on(M, "w", &chain, Tier::Gpu).await.unwrap();
    // A snapshot committed, not patched: the first 16 blocks on the GPU,
    // 16 on the CPU, 16 on disk (each ending at an indexed block), the
    // last 32 gone.
    let tiers: Vec<Tier> = (0..48).map(|i| Tier::ALL[i / 16]).collect();
    commit_unpatched(&v, &s, "w", &chain[..48], &tiers).await;
    let want = TierBlocks {
        gpu: 16,
        cpu: 16,
        disk: 16,
    };
    let exact = s.probe_with_gaps(M, &chain).await.unwrap();
    assert_eq!(exact.workers[0].by_tier(), want, "lookup");
    let o = s
        .route(
            M,
            &chain,
            &state::RouteParams::new(80 * 16, 16, 3),
            &[],
            &[],
        )
        .await
        .unwrap();
    assert_eq!(o.lookup.workers[0].by_tier(), want, "route");
    assert_eq!(o.prefill_tokens, 32 * 16, "the prompt beyond every tier");
}
