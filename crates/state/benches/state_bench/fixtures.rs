//! The state under test: the bench's namespace, model and workers, its key
//! names, and helpers that build a store and fill it through `StateStore`.

use std::time::Duration;

use anyhow::{Result, ensure};
use protocol::hashing::BlockHash;
use rand::Rng;
use rand::rngs::StdRng;
use state::{
    BatchLimits, ConnectionSettings, ScriptName, ScriptSet, StateStore, StateTtls, WorkerHeartbeat,
};

pub const NS: &str = "bench";
pub const MODEL: &str = "bench-model";
pub const WORKERS: usize = 8;
pub const FILL_BATCH: usize = 4096;

/// The library function `script` is called as (FCALL's first argument).
pub fn function_of(script: ScriptName) -> String {
    ScriptSet::new().function(script).to_owned()
}

pub fn bucket_key(h: BlockHash) -> String {
    let hex = h.to_hex();
    let d = u8::from_str_radix(&hex[3..4], 16).unwrap_or(0) & !3;
    format!("{NS}:{{{MODEL}}}:f:{}{:x}", &hex[..3], d)
}

pub fn reverse_key(idx: u64) -> String {
    format!("{NS}:{{{MODEL}}}:r:{idx}")
}

pub fn all_bucket_keys() -> Vec<String> {
    (0..16384u32)
        .map(|i| format!("{NS}:{{{MODEL}}}:f:{:03x}{:x}", i >> 2, (i & 3) * 4))
        .collect()
}

pub fn fresh(rng: &mut StdRng, n: usize) -> Vec<BlockHash> {
    (0..n).map(|_| BlockHash(rng.random())).collect()
}

pub fn new_store(url: &str, limits: BatchLimits) -> Result<StateStore> {
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(3600),
        ..StateTtls::default()
    };
    Ok(StateStore::new(
        ConnectionSettings::new(url),
        NS,
        "bench-router",
        ttls,
        limits,
    )?)
}

pub fn worker_id(i: usize) -> String {
    format!("w{i}")
}

/// Registers a worker; returns its incarnation.
pub async fn register(store: &StateStore, id: &str) -> Result<u64> {
    let lease = store
        .heartbeat(
            MODEL,
            &WorkerHeartbeat {
                worker_id: id.to_owned(),
                url: format!("http://127.0.0.1:9/{id}"),
                load: None,
            },
        )
        .await?;
    Ok(lease.incarnation)
}

/// Confirms `hashes` for `worker`, in batches of `FILL_BATCH`; returns inserted.
pub async fn store_all(store: &StateStore, worker: &str, hashes: &[BlockHash]) -> Result<u64> {
    let mut inserted = 0;
    for chunk in hashes.chunks(FILL_BATCH) {
        inserted += store.stored(MODEL, worker, chunk).await?.inserted;
    }
    Ok(inserted)
}

/// Fills `entries` (block, worker) entries over the 8 workers, each block
/// held by `holders` workers; returns the hashes each worker holds.
pub async fn fill(
    store: &StateStore,
    holders: usize,
    entries: usize,
    rng: &mut StdRng,
) -> Result<Vec<Vec<BlockHash>>> {
    let blocks = entries / holders;
    let cap = entries / WORKERS + 1;
    let mut per: Vec<Vec<BlockHash>> = (0..WORKERS).map(|_| Vec::with_capacity(cap)).collect();
    for j in 0..blocks {
        let h = BlockHash(rng.random());
        for k in 0..holders {
            per[(j + k) % WORKERS].push(h);
        }
    }
    let mut inserted = 0;
    for (i, hashes) in per.iter().enumerate() {
        inserted += store_all(store, &worker_id(i), hashes).await?;
    }
    ensure!(
        inserted == entries as u64,
        "inserted {inserted} entries, expected {entries}"
    );
    Ok(per)
}
