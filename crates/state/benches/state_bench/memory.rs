//! Section A: memory per (block, worker) entry. Fills an empty server through
//! the store and reads `used_memory`, bucket and reverse-set stats around it.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use protocol::hashing::BlockHash;
use rand::rngs::StdRng;
use redis::Value;
use state::{BatchLimits, StateStore};

use crate::fixtures::{
    MODEL, WORKERS, all_bucket_keys, bucket_key, fill, new_store, register, reverse_key, worker_id,
};
use crate::raw::{Raw, as_i64, as_string};

/// Field counts, encodings and MEMORY USAGE over all forward bucket keys.
#[derive(Default)]
pub struct BucketStats {
    pub non_empty: u64,
    pub fields_min: u64,
    pub fields_max: u64,
    pub fields_total: u64,
    pub encodings: BTreeMap<String, u64>,
    pub memory_usage_total: u64,
}

pub async fn bucket_stats(raw: &mut Raw) -> Result<BucketStats> {
    let keys = all_bucket_keys();
    let mut s = BucketStats {
        fields_min: u64::MAX,
        ..BucketStats::default()
    };
    for chunk in keys.chunks(1024) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.cmd("HLEN").arg(k);
            pipe.cmd("OBJECT").arg("ENCODING").arg(k);
            pipe.cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0);
        }
        let replies: Vec<Value> = pipe.query_async(&mut raw.conn).await?;
        for r in replies.chunks(3) {
            let fields = as_i64(&r[0]).unwrap_or(0) as u64;
            if fields == 0 {
                continue;
            }
            s.non_empty += 1;
            s.fields_total += fields;
            s.fields_min = s.fields_min.min(fields);
            s.fields_max = s.fields_max.max(fields);
            let enc = as_string(&r[1]).unwrap_or_else(|| "?".into());
            *s.encodings.entry(enc).or_default() += 1;
            s.memory_usage_total += as_i64(&r[2]).unwrap_or(0) as u64;
        }
    }
    if s.non_empty == 0 {
        s.fields_min = 0;
    }
    Ok(s)
}

/// One key: its length, `OBJECT ENCODING` and `MEMORY USAGE`.
pub struct KeyInfo {
    pub key: String,
    pub len: u64,
    pub encoding: String,
    pub memory_usage: u64,
}

async fn key_info(raw: &mut Raw, key: &str, len_cmd: &str) -> Result<KeyInfo> {
    let len: u64 = raw.cmd(&[len_cmd, key]).await?;
    let encoding: Option<String> = raw.cmd(&["OBJECT", "ENCODING", key]).await?;
    let usage: Option<u64> = raw.cmd(&["MEMORY", "USAGE", key, "SAMPLES", "0"]).await?;
    Ok(KeyInfo {
        key: key.to_owned(),
        len,
        encoding: encoding.unwrap_or_else(|| "(none)".into()),
        memory_usage: usage.unwrap_or(0),
    })
}

/// One memory scenario: `holders` workers per block, `entries` entries.
pub struct MemResult {
    pub holders: usize,
    pub entries: usize,
    pub blocks: usize,
    pub before: u64,
    pub after: u64,
    pub dataset_before: u64,
    pub dataset_after: u64,
    pub fill_secs: f64,
    pub buckets: BucketStats,
    pub reverse: Vec<KeyInfo>,
    pub samples: Vec<KeyInfo>,
    pub sample_value: String,
    pub dbsize: u64,
}

impl MemResult {
    pub fn delta(&self) -> i64 {
        self.after as i64 - self.before as i64
    }
}

/// Flushes the server, registers the workers and fills `entries` entries;
/// returns the result, the store, the hashes per worker and the incarnations.
pub async fn memory_scenario(
    url: &str,
    raw: &mut Raw,
    holders: usize,
    entries: usize,
    rng: &mut StdRng,
) -> Result<(MemResult, StateStore, Vec<Vec<BlockHash>>, Vec<u64>)> {
    eprintln!("memory: {holders} holder(s) per block, {entries} entries");
    let _: Value = raw.cmd(&["FLUSHALL", "SYNC"]).await?;
    let store = new_store(url, BatchLimits::default())?;
    store.load_scripts().await?;
    let mut idxs = Vec::new();
    for i in 0..WORKERS {
        idxs.push(register(&store, &worker_id(i)).await?);
    }
    // Warm the bulk connection and the script path before the baseline.
    store.stored(MODEL, &worker_id(0), &[]).await?;
    let before = raw.used_memory().await?;
    let dataset_before = raw.info_u64("memory", "used_memory_dataset").await?;
    let t = Instant::now();
    let per = fill(&store, holders, entries, rng).await?;
    let fill_secs = t.elapsed().as_secs_f64();
    let after = raw.used_memory().await?;
    let dataset_after = raw.info_u64("memory", "used_memory_dataset").await?;
    let buckets = bucket_stats(raw).await?;
    let mut reverse = Vec::new();
    for &idx in &idxs {
        reverse.push(key_info(raw, &reverse_key(idx), "SCARD").await?);
    }
    let mut samples = Vec::new();
    for h in per[0].iter().take(3) {
        samples.push(key_info(raw, &bucket_key(*h), "HLEN").await?);
    }
    let h0 = per[0][0];
    let sample_value: Option<String> = raw.cmd(&["HGET", &bucket_key(h0), &h0.to_hex()]).await?;
    let dbsize: u64 = raw.cmd(&["DBSIZE"]).await?;
    let r = MemResult {
        holders,
        entries,
        blocks: entries / holders,
        before,
        after,
        dataset_before,
        dataset_after,
        fill_secs,
        buckets,
        reverse,
        samples,
        sample_value: format!("{} = {}", h0.to_hex(), sample_value.unwrap_or_default()),
        dbsize,
    };
    Ok((r, store, per, idxs))
}
