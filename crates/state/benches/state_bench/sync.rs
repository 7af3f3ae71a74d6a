//! Section C: a full sync of 200,000 hashes over 200,000 held, as one
//! `sync()` call or as `sync_stage()` then `sync_commit()`, each part in its
//! own stat window.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use protocol::hashing::BlockHash;
use rand::rngs::StdRng;
use state::StateStore;

use crate::fixtures::{MODEL, fresh, register, reverse_key, store_all};
use crate::raw::{Raw, Window};

/// One measured call of a sync run.
pub struct SyncPart {
    pub label: &'static str,
    pub wall: Duration,
    pub w: Window,
}

/// One sync run: its measured parts and the outcome.
pub struct SyncRun {
    pub parts: Vec<SyncPart>,
    pub active: u64,
    pub held_after: u64,
}

/// A worker holding 200k blocks synced to 200k (`kept` of them kept, the rest
/// new); as one `sync()` call, or (`split`) as `sync_stage()` then `sync_commit()`.
pub async fn full_sync(
    raw: &mut Raw,
    store: &StateStore,
    rng: &mut StdRng,
    id: &str,
    split: bool,
    kept: usize,
) -> Result<SyncRun> {
    let idx = register(store, id).await?;
    let old = fresh(rng, 200_000);
    store_all(store, id, &old).await?;
    let mut snapshot: Vec<BlockHash> = old[..kept].to_vec();
    snapshot.extend(fresh(rng, 200_000 - kept));
    let mut parts = Vec::new();
    let active = if split {
        let sync_id = "bench-split";
        raw.begin().await?;
        let t = Instant::now();
        store.sync_stage(MODEL, id, sync_id, &snapshot).await?;
        let wall = t.elapsed();
        parts.push(SyncPart {
            label: "sync_stage()",
            wall,
            w: raw.window("fcall").await?,
        });
        raw.begin().await?;
        let t = Instant::now();
        let active = store.sync_commit(MODEL, id, sync_id).await?.active;
        let wall = t.elapsed();
        parts.push(SyncPart {
            label: "sync_commit() (commit + patch steps)",
            wall,
            w: raw.window("fcall").await?,
        });
        active
    } else {
        raw.begin().await?;
        let t = Instant::now();
        let active = store.sync(MODEL, id, &snapshot).await?.active;
        let wall = t.elapsed();
        parts.push(SyncPart {
            label: "sync()",
            wall,
            w: raw.window("fcall").await?,
        });
        active
    };
    let held_after: u64 = raw.cmd(&["SCARD", &reverse_key(idx)]).await?;
    ensure!(
        held_after == snapshot.len() as u64,
        "{id} holds {held_after} after sync, expected {}",
        snapshot.len()
    );
    Ok(SyncRun {
        parts,
        active,
        held_after,
    })
}
