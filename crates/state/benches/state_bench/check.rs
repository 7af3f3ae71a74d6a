//! Section D: the periodic anti-entropy of an unchanged worker. The digest
//! check (`sync_check.lua`) against the full sync of the same snapshot,
//! which is what every period cost before the check existed, on a worker
//! holding 200,000 confirmed entries; the check of a snapshot that
//! differs by one block; and the other per-worker and per-request calls
//! (heartbeats, in-flight counts, load reports), for docs/capacity.md.

use std::time::Instant;

use anyhow::{Result, ensure};
use protocol::index::{digests, digests_hex};
use rand::rngs::StdRng;
use state::StateStore;

use crate::fixtures::{MODEL, fresh, register, store_all};
use crate::raw::Raw;
use crate::sync::SyncPart;

/// One worker's measured anti-entropy calls.
pub struct CheckRun {
    pub entries: usize,
    pub parts: Vec<SyncPart>,
}

/// Fills worker `id` with `entries` confirmed blocks, then measures: the
/// check of its exact snapshot, the check of the snapshot plus one block,
/// and a full sync of its exact snapshot.
pub async fn unchanged_sync(
    raw: &mut Raw,
    store: &StateStore,
    rng: &mut StdRng,
    id: &str,
    entries: usize,
) -> Result<CheckRun> {
    register(store, id).await?;
    let set = fresh(rng, entries);
    store_all(store, id, &set).await?;
    let mut parts = Vec::new();

    let same = digests_hex(&digests(set.iter().copied()));
    raw.begin().await?;
    let t = Instant::now();
    let found = store.sync_check(MODEL, id, &same).await?;
    let wall = t.elapsed();
    ensure!(
        found.is_none(),
        "an unchanged worker's digests differ: {found:?}"
    );
    parts.push(SyncPart {
        label: "sync_check(), unchanged",
        wall,
        w: raw.window("fcall").await?,
    });

    let more = digests_hex(&digests(set.iter().copied().chain(fresh(rng, 1))));
    raw.begin().await?;
    let t = Instant::now();
    let found = store.sync_check(MODEL, id, &more).await?;
    let wall = t.elapsed();
    ensure!(
        found.as_ref().map(Vec::len) == Some(1),
        "one block more should differ in one bucket: {found:?}"
    );
    parts.push(SyncPart {
        label: "sync_check(), one block more",
        wall,
        w: raw.window("fcall").await?,
    });

    raw.begin().await?;
    let t = Instant::now();
    store.sync(MODEL, id, &set).await?;
    let wall = t.elapsed();
    parts.push(SyncPart {
        label: "sync() of the same snapshot",
        wall,
        w: raw.window("fcall").await?,
    });

    // A worker whose reports were lost: k blocks gone and k new. The check
    // lists their buckets; a repair syncs those alone. Server time is its
    // FCALLs plus the plain reads (HGET, HMGET of the digests, SMISMEMBER,
    // and HGETALLs of forward buckets where one differs by more than one
    // block).
    let mut held = set.clone();
    for k in [1usize, 10] {
        let new = fresh(rng, k);
        let changed: Vec<protocol::BlockHash> = held[k..]
            .iter()
            .copied()
            .chain(new.iter().copied())
            .collect();
        let hex = digests_hex(&digests(changed.iter().copied()));
        let differing = store.sync_check(MODEL, id, &hex).await?.unwrap_or_default();
        // What the worker sends: its blocks in those buckets.
        let listed: Vec<protocol::BlockHash> = changed
            .iter()
            .copied()
            .filter(|h| differing.contains(&format!("{:02x}", h.0 >> 56)))
            .collect();
        let (out, wall, w) = timed_repair(raw, store, id, &differing, &listed).await?;
        ensure!(
            out.added == k as u64 && out.removed == k as u64,
            "repair of {k}+{k}: {out:?}"
        );
        ensure!(
            store.sync_check(MODEL, id, &hex).await?.is_none(),
            "still differs after the repair"
        );
        parts.push(SyncPart {
            label: if k == 1 {
                "repair: 1 block gone, 1 new (2 buckets, one block each)"
            } else {
                "repair: 10 blocks gone, 10 new (~20 buckets, one block each)"
            },
            wall,
            w,
        });
        held = changed;
    }
    // Two blocks gone from one bucket: the digests' XOR names neither, so
    // the repair reads the bucket's members (its 32 forward buckets). Alone,
    // then with 1M other workers' entries in the same buckets.
    held = two_gone_from_one_bucket(raw, store, id, held, &mut parts, false).await?;
    for w in 0..5 {
        let other = format!("{id}-neighbour-{w}");
        register(store, &other).await?;
        store_all(store, &other, &fresh(rng, 200_000)).await?;
    }
    two_gone_from_one_bucket(raw, store, id, held, &mut parts, true).await?;

    // What every worker costs every period besides its sync, and every
    // request besides its route: 100 of each.
    parts.push(
        timed(raw, "heartbeat (lease renewal) × 100", || async {
            for _ in 0..100 {
                register(store, id).await?;
            }
            Ok(())
        })
        .await?,
    );
    parts.push(
        timed(raw, "in-flight +1 then −1 × 100", || async {
            for _ in 0..100 {
                store
                    .change_in_flight(MODEL, id, state::InFlight::requests(1))
                    .await?;
                store
                    .change_in_flight(MODEL, id, state::InFlight::requests(-1))
                    .await?;
            }
            Ok(())
        })
        .await?,
    );
    parts.push(
        timed(raw, "load report × 100", || async {
            for i in 0..100u64 {
                store
                    .report_load(MODEL, id, Some(i % 7), Some(3), Some(0.5))
                    .await?;
            }
            Ok(())
        })
        .await?,
    );
    // The write path per block: 50 batches of 64 new blocks stored, then
    // the same evicted (a worker holding 200k entries).
    let batches: Vec<Vec<protocol::BlockHash>> = (0..50).map(|_| fresh(rng, 64)).collect();
    parts.push(
        timed(raw, "stored, 64 new blocks × 50", || async {
            for b in &batches {
                store.stored(MODEL, id, b).await?;
            }
            Ok(())
        })
        .await?,
    );
    parts.push(
        timed(raw, "evict, 64 blocks × 50", || async {
            for b in &batches {
                store.evict(MODEL, id, b).await?;
            }
            Ok(())
        })
        .await?,
    );
    Ok(CheckRun { entries, parts })
}

/// Two of `held` in one digest bucket lost (the worker evicted them, the
/// fleet never heard): repaired, timed. Returns what the worker now holds.
async fn two_gone_from_one_bucket(
    raw: &mut Raw,
    store: &StateStore,
    id: &str,
    held: Vec<protocol::BlockHash>,
    parts: &mut Vec<SyncPart>,
    neighbours: bool,
) -> Result<Vec<protocol::BlockHash>> {
    let bucket = held[0].0 >> 56;
    let pair: Vec<protocol::BlockHash> = held
        .iter()
        .copied()
        .filter(|h| h.0 >> 56 == bucket)
        .take(2)
        .collect();
    let changed: Vec<protocol::BlockHash> =
        held.iter().copied().filter(|h| !pair.contains(h)).collect();
    let hex = digests_hex(&digests(changed.iter().copied()));
    let differing = store.sync_check(MODEL, id, &hex).await?.unwrap_or_default();
    let listed: Vec<protocol::BlockHash> = changed
        .iter()
        .copied()
        .filter(|h| h.0 >> 56 == bucket)
        .collect();
    let (out, wall, w) = timed_repair(raw, store, id, &differing, &listed).await?;
    ensure!(out.removed == 2, "repair of two in one bucket: {out:?}");
    ensure!(
        store.sync_check(MODEL, id, &hex).await?.is_none(),
        "still differs after the repair"
    );
    parts.push(SyncPart {
        label: if neighbours {
            "repair: 2 blocks gone from one bucket, 5 more workers × 200k entries"
        } else {
            "repair: 2 blocks gone from one bucket (its forward buckets read)"
        },
        wall,
        w,
    });
    Ok(changed)
}

/// One repair in its own stats window: its FCALLs plus the plain reads it
/// makes (HGET, HMGET of the digests, SMISMEMBER, HGETALL of forward
/// buckets).
async fn timed_repair(
    raw: &mut Raw,
    store: &StateStore,
    id: &str,
    differing: &[String],
    listed: &[protocol::BlockHash],
) -> Result<(
    state::RepairOutcome,
    std::time::Duration,
    crate::raw::Window,
)> {
    raw.begin().await?;
    let t = Instant::now();
    let out = store
        .sync_repair(MODEL, id, differing, listed, None, None)
        .await?;
    let wall = t.elapsed();
    let mut w = raw.window("fcall").await?;
    for (cmd, stat) in raw.command_stats().await? {
        if matches!(
            cmd.as_str(),
            "sscan" | "hget" | "hmget" | "smismember" | "hgetall"
        ) {
            w.stat.calls += stat.calls;
            w.stat.usec += stat.usec;
        }
    }
    Ok((out, wall, w))
}

/// Runs `work` in its own stats window.
async fn timed<F, Fut>(raw: &mut Raw, label: &'static str, work: F) -> Result<SyncPart>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    raw.begin().await?;
    let t = Instant::now();
    work().await?;
    let wall = t.elapsed();
    Ok(SyncPart {
        label,
        wall,
        w: raw.window("fcall").await?,
    })
}
