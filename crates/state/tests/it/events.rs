//! One flush of a worker's reports in one call (`apply_events.lua`,
//! `StateStore::apply_events`): the same state as the separate `evict` and
//! `stored` calls it replaces, events applied in their order, a malformed
//! call writing nothing, the batch limit, and a sharded model on a real
//! Valkey Cluster.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fleet::ValkeyCluster;
use protocol::Tier;
use protocol::family::{FamilyBlock, block_shards, split_families};
use protocol::hashing::BlockHash;
use protocol::index::{digests_hex, tiered_digests};
use state::{
    BatchLimits, BlockEvent, ConnectionSettings, EventsOutcome, ScriptName, Sharding, StateError,
    StateStore, StateTtls, StoredOutcome,
};
use support::{M, Valkey, raw_state, register_in, store, store_with};

fn ttls() -> StateTtls {
    StateTtls {
        worker_lease: Duration::from_secs(120),
        router_lease: Duration::from_secs(120),
        ..StateTtls::default()
    }
}

/// Hashes spread over the key space (and so over buckets and digests).
fn spread(n: u64, salt: u64) -> Vec<BlockHash> {
    (1..=n)
        .map(|i| BlockHash((i ^ (salt << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect()
}

fn stored(hashes: &[BlockHash], tier: Tier) -> BlockEvent<'_> {
    BlockEvent {
        stored_on: Some(tier),
        hashes,
        families: None,
    }
}

fn evicted(hashes: &[BlockHash]) -> BlockEvent<'_> {
    BlockEvent {
        stored_on: None,
        hashes,
        families: None,
    }
}

/// What a namespace holds for its model, expiries left out (two stores
/// write them a second apart at worst): forward kinds, reverse and
/// speculative sets, the digests, the worker record's `tiered` mark.
fn state_of(v: &Valkey, ns: &str) -> impl PartialEq + std::fmt::Debug {
    let raw = raw_state(v, ns, M);
    let kinds: BTreeMap<String, BTreeMap<String, char>> = raw
        .forward
        .iter()
        .map(|(h, m)| {
            (
                h.clone(),
                m.iter().map(|(i, (k, _))| (i.clone(), *k)).collect(),
            )
        })
        .collect();
    let mut c = v.conn();
    let base = format!("{ns}:{{{M}}}");
    let digests: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(format!("{base}:dg:1"))
        .query(&mut c)
        .unwrap();
    let tiered: Option<String> = redis::cmd("HGET")
        .arg(format!("{base}:w:1"))
        .arg("tiered")
        .query(&mut c)
        .unwrap();
    (kinds, raw.reverse, raw.speculative, digests, tiered)
}

async fn check_clean(url: &str, ns: &str) {
    let mut inspect = state::inspect::InspectArgs::new(url);
    inspect.key_prefix = ns.into();
    inspect.recheck_delay = Duration::ZERO;
    let report = state::inspect::check(&inspect).await.unwrap();
    assert!(report.clean, "{ns}: {:#?}", report.shown);
}

#[tokio::test]
async fn a_flush_in_one_call_equals_the_separate_calls() {
    let v = Valkey::start();
    let (one, two) = (
        store(&v, "ev1", "r1", ttls()),
        store(&v, "ev2", "r1", ttls()),
    );
    let gpu = spread(300, 1);
    let cpu = spread(100, 2);
    let claimed = spread(80, 3);
    for s in [&one, &two] {
        register_in(s, "w").await;
        s.stored(M, "w", &gpu).await.unwrap();
        s.stored_on(M, "w", &cpu, Tier::Cpu).await.unwrap();
        s.claim(M, "w", &claimed).await.unwrap();
    }
    assert_eq!(state_of(&v, "ev1"), state_of(&v, "ev2"));
    // The flush: evictions of held, claimed and unknown blocks; stores of
    // new blocks, of claimed ones, of CPU blocks loaded back onto the GPU,
    // and demotions of GPU blocks to the CPU and to disk. 570 hashes: nine
    // calls of 64.
    let gone: Vec<BlockHash> = [&gpu[..120], &claimed[..30], &spread(40, 4)[..]].concat();
    let back: Vec<BlockHash> = [&spread(150, 5)[..], &claimed[40..], &cpu[..50]].concat();
    let demoted = gpu[200..260].to_vec();
    let to_disk = gpu[260..].to_vec();
    let removed = one.evict(M, "w", &gone).await.unwrap();
    let mut apart = StoredOutcome::default();
    for (blocks, tier) in [
        (&back, Tier::Gpu),
        (&demoted, Tier::Cpu),
        (&to_disk, Tier::Disk),
    ] {
        let o = one.stored_on(M, "w", blocks, tier).await.unwrap();
        apart.inserted += o.inserted;
        apart.promoted += o.promoted;
        apart.refreshed += o.refreshed;
    }
    let together = two
        .apply_events(
            M,
            "w",
            &[
                evicted(&gone),
                stored(&back, Tier::Gpu),
                stored(&demoted, Tier::Cpu),
                stored(&to_disk, Tier::Disk),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        together,
        EventsOutcome {
            stored: apart,
            removed
        }
    );
    assert_eq!(removed, 150);
    assert_eq!(state_of(&v, "ev1"), state_of(&v, "ev2"));
    check_clean(&v.url(), "ev1").await;
    check_clean(&v.url(), "ev2").await;
}

/// The digests of what the worker holds, per tier.
fn digests_of(blocks: &BTreeMap<BlockHash, Tier>) -> String {
    digests_hex(&tiered_digests(blocks.iter().map(|(h, t)| (*h, *t))))
}

#[tokio::test]
async fn events_apply_in_their_order_within_one_call() {
    let v = Valkey::start();
    let s = store(&v, "ev", "r1", ttls());
    register_in(&s, "w").await;
    let [a, b, c] = [spread(1, 7)[0], spread(1, 8)[0], spread(1, 9)[0]];
    s.stored(M, "w", &[c]).await.unwrap();
    // a: stored, evicted, stored again; b: stored, then evicted; c (held):
    // evicted, stored on the CPU, evicted again, stored on the GPU.
    let out = s
        .apply_events(
            M,
            "w",
            &[
                stored(&[a, b], Tier::Gpu),
                evicted(&[a, b, c]),
                stored(&[a, c], Tier::Cpu),
                evicted(&[c]),
                stored(&[c], Tier::Gpu),
                stored(&[a], Tier::Gpu),
            ],
        )
        .await
        .unwrap();
    assert_eq!(out.removed, 4, "{out:?}");
    let held = support::worker_blocks(&v, "ev", M, "w");
    let want: BTreeSet<String> = [a, c].iter().map(|h| h.to_hex()).collect();
    assert_eq!(held, want);
    let raw = raw_state(&v, "ev", M);
    for h in [a, c] {
        assert_eq!(raw.forward[&h.to_hex()]["1"].0, 'c', "{h}");
    }
    let worker = BTreeMap::from([(a, Tier::Gpu), (c, Tier::Gpu)]);
    assert_eq!(
        s.sync_check(M, "w", &digests_of(&worker)).await.unwrap(),
        None
    );
    check_clean(&v.url(), "ev").await;
}

#[tokio::test]
async fn a_malformed_call_or_an_oversized_flush_writes_nothing() {
    let v = Valkey::start();
    let limits = BatchLimits {
        max_batch_hashes: 100,
        ..BatchLimits::default()
    };
    let s = store_with(&v, "ev", "r1", ttls(), limits);
    register_in(&s, "w").await;
    let held = spread(10, 1);
    s.stored(M, "w", &held).await.unwrap();
    let before = state_of(&v, "ev");
    let (x, y) = (spread(1, 2)[0].to_hex(), held[0].to_hex());
    let mut c = v.client().get_multiplexed_async_connection().await.unwrap();
    // A good first group (an eviction of a held block), then a bad one.
    for tail in [
        vec!["c", "1", "not-a-hash"],
        vec!["x", "1", x.as_str()],
        vec!["c", "2", x.as_str()],
        vec!["c", "-1"],
        vec!["c"],
    ] {
        let mut args: Vec<&[u8]> = vec![b"w", b"600000", b"e", b"1", y.as_bytes()];
        args.extend(tail.iter().map(|a| a.as_bytes()));
        let (base, ids) = (format!("ev:{{{M}}}"), format!("ev:{{{M}}}:ids"));
        let mut all: Vec<&[u8]> = vec![base.as_bytes()];
        all.extend_from_slice(&args);
        let r: Result<i64, StateError> = state::ScriptSet::new()
            .call(&mut c, ScriptName::ApplyEvents, &[&ids], &all)
            .await;
        assert!(r.is_err(), "{tail:?}");
        assert_eq!(state_of(&v, "ev"), before, "{tail:?}");
    }
    // Over the batch limit in all (60 + 60 > 100): refused before any call.
    let (e, n) = (spread(60, 3), spread(60, 4));
    let err = s
        .apply_events(
            M,
            "w",
            &[evicted(&held), evicted(&e), stored(&n, Tier::Gpu)],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::Invalid { .. }), "{err:?}");
    assert_eq!(state_of(&v, "ev"), before);
    // An unknown worker: its error, nothing written.
    let err = s
        .apply_events(M, "nobody", &[stored(&n, Tier::Gpu)])
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::UnknownWorker { .. }), "{err:?}");
    let err = s.apply_events(M, "nobody", &[]).await.unwrap_err();
    assert!(matches!(err, StateError::UnknownWorker { .. }), "{err:?}");
    assert_eq!(state_of(&v, "ev"), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_flush_lands_in_its_families_parts_on_a_valkey_cluster() {
    let cluster = ValkeyCluster::start(3, 1).unwrap();
    let shards = 6;
    let mut settings = ConnectionSettings::new(cluster.seeds());
    settings.hot_timeout = Duration::from_secs(2);
    let s = StateStore::new(settings, "pr", "r1", ttls(), BatchLimits::default()).unwrap();
    s.set_sharding(Sharding {
        shards,
        family_blocks: 1,
    })
    .unwrap();
    register_in(&s, "w").await;
    // Blocks of 12 families and head blocks (no family: every part).
    let placed = |hashes: Vec<BlockHash>, tier: Tier| -> Vec<FamilyBlock> {
        hashes
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                let family = (i % 13 != 0).then_some(BlockHash(i as u64 % 12 + 1));
                FamilyBlock {
                    hash: h,
                    family,
                    tier,
                }
            })
            .collect()
    };
    let first = placed(spread(400, 1), Tier::Gpu);
    let (h, f) = split_families(&first);
    s.apply_events(
        M,
        "w",
        &[BlockEvent {
            stored_on: Some(Tier::Gpu),
            hashes: &h,
            families: Some(&f),
        }],
    )
    .await
    .unwrap();
    let gone: Vec<FamilyBlock> = first[..150].to_vec();
    let new = placed(spread(200, 2), Tier::Cpu);
    let again: Vec<FamilyBlock> = first[..20].to_vec();
    let (gh, gf) = split_families(&gone);
    let (nh, nf) = split_families(&new);
    let (ah, af) = split_families(&again);
    let out = s
        .apply_events(
            M,
            "w",
            &[
                BlockEvent {
                    stored_on: None,
                    hashes: &gh,
                    families: Some(&gf),
                },
                BlockEvent {
                    stored_on: Some(Tier::Cpu),
                    hashes: &nh,
                    families: Some(&nf),
                },
                BlockEvent {
                    stored_on: Some(Tier::Gpu),
                    hashes: &ah,
                    families: Some(&af),
                },
            ],
        )
        .await
        .unwrap();
    assert!(out.removed >= 150, "{out:?}");
    // The worker now holds first[150..] and again on the GPU, new on the CPU:
    // each part's digests are those of the blocks of its families.
    let worker: Vec<FamilyBlock> = first[150..]
        .iter()
        .chain(&new)
        .chain(&again)
        .copied()
        .collect();
    let mut sets: Vec<BTreeMap<BlockHash, Tier>> = vec![BTreeMap::new(); shards];
    for b in &worker {
        for p in block_shards(b.family, shards) {
            sets[p].insert(b.hash, b.tier);
        }
    }
    let per_shard: Vec<String> = sets.iter().map(digests_of).collect();
    assert_eq!(s.sync_check_shards(M, "w", &per_shard).await.unwrap(), None);
    let mut inspect = state::inspect::InspectArgs::new(cluster.seeds());
    inspect.recheck_delay = Duration::ZERO;
    let report = state::inspect::check(&inspect).await.unwrap();
    assert!(report.clean, "{:#?}", report.shown);
}
