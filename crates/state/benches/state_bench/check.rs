//! Section D: the periodic anti-entropy of an unchanged worker. The digest
//! check (`sync_check.lua`) against the full sync of the same snapshot,
//! which is what every period cost before the check existed, on a worker
//! holding 200,000 confirmed entries; and the check of a snapshot that
//! differs by one block.

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
    Ok(CheckRun { entries, parts })
}
