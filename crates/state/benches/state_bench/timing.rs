//! Section B: server time per script call. Each row is one script and one
//! batch size in its own stat window (`Raw::begin` .. `end`): the batch
//! scripts through the store, then `sync_patch.lua` steps called directly.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use protocol::hashing::BlockHash;
use rand::Rng;
use rand::rngs::StdRng;
use redis::Value;
use state::{BatchLimits, ScriptName, ScriptSet, StateStore};

use crate::fixtures::{
    MODEL, WORKERS, fresh, new_store, register, reverse_key, store_all, worker_id,
};
use crate::raw::{CmdStat, Raw};

/// One measured row: a script, a batch size, and what the window saw.
pub struct Timing {
    pub label: String,
    pub hashes: String,
    pub expected_calls: usize,
    pub stat: CmdStat,
    pub lat: Option<[f64; 3]>,
    /// Exact durations of this script's calls over 1 ms (slowlog), sorted.
    pub slow: Vec<u64>,
    pub wall: Duration,
    pub note: String,
}

/// Ends a measurement window opened by `Raw::begin` for `script`.
async fn end(
    raw: &mut Raw,
    script: ScriptName,
    label: &str,
    hashes: String,
    expected_calls: usize,
    wall: Duration,
    mut note: String,
) -> Result<Timing> {
    let cmd = if matches!(script, ScriptName::Probe | ScriptName::Workers) {
        "fcall_ro"
    } else {
        "fcall"
    };
    let w = raw.window(cmd).await?;
    let (stat, lat, slow) = (w.stat, w.lat, w.slow_of(script));
    if stat.calls != expected_calls as u64 {
        let _ = write!(
            note,
            " {cmd} calls {} != expected {expected_calls};",
            stat.calls
        );
    }
    if stat.failed_calls != 0 {
        let _ = write!(note, " {} failed calls;", stat.failed_calls);
    }
    let t = Timing {
        label: label.to_owned(),
        hashes,
        expected_calls,
        stat,
        lat,
        slow,
        wall,
        note: note.trim().to_owned(),
    };
    eprintln!(
        "  {:<22} {:>5} x {:>4}: {:.2} usec/call",
        t.label, t.stat.calls, t.hashes, t.stat.usec_per_call
    );
    Ok(t)
}

/// Turns the slowlog on for calls over 1 ms and builds the store of the
/// per-call rows: one EVALSHA per batch (up to 512 hashes), 8 workers.
pub async fn call_store(url: &str, raw: &mut Raw) -> Result<StateStore> {
    // Exact durations of calls over 1 ms. Not 0: that would also log every
    // redis.call inside the scripts, inside their measured time.
    let _: Value = raw
        .cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "1000"])
        .await?;
    let _: Value = raw.cmd(&["SLOWLOG", "RESET"]).await?;
    let limits512 = BatchLimits {
        hashes_per_call: 512,
        ..BatchLimits::default()
    };
    let store = new_store(url, limits512)?;
    store.load_scripts().await?;
    for i in 0..WORKERS {
        register(&store, &worker_id(i)).await?;
    }
    Ok(store)
}

/// claim, stored (promote), stored (insert), lookup and evict at 1, 64, 128
/// and 512 hashes per call; lookups walk chains of `held0` (held by w0).
pub async fn script_calls(
    raw: &mut Raw,
    store: &StateStore,
    rng: &mut StdRng,
    held0: &[BlockHash],
) -> Result<Vec<Timing>> {
    let w0 = worker_id(0);
    // Warm both lanes.
    store.probe(MODEL, &held0[..1]).await?;
    store.stored(MODEL, &w0, &[]).await?;

    let mut rows = Vec::new();
    for (n, calls) in [(1usize, 2000usize), (64, 2000), (128, 1000), (512, 500)] {
        let a = fresh(rng, n * calls);
        let b = fresh(rng, n * calls);
        let hs = n.to_string();

        raw.begin().await?;
        let t = Instant::now();
        let mut got = 0;
        for c in a.chunks(n) {
            got += store.claim(MODEL, &w0, c).await?;
        }
        let note = if got == a.len() as u64 {
            "every hash new (insert path)".to_owned()
        } else {
            format!("inserted {got} of {}", a.len())
        };
        rows.push(
            end(
                raw,
                ScriptName::Claim,
                "claim",
                hs.clone(),
                calls,
                t.elapsed(),
                note,
            )
            .await?,
        );

        raw.begin().await?;
        let t = Instant::now();
        let mut got = 0;
        for c in a.chunks(n) {
            got += store.stored(MODEL, &w0, c).await?.promoted;
        }
        let note = format!("promoted {got} of {} speculative entries", a.len());
        rows.push(
            end(
                raw,
                ScriptName::Stored,
                "stored (promote)",
                hs.clone(),
                calls,
                t.elapsed(),
                note,
            )
            .await?,
        );

        raw.begin().await?;
        let t = Instant::now();
        let mut got = 0;
        for c in b.chunks(n) {
            got += store.stored(MODEL, &w0, c).await?.inserted;
        }
        let note = format!("inserted {got} of {} new entries", b.len());
        rows.push(
            end(
                raw,
                ScriptName::Stored,
                "stored (insert)",
                hs.clone(),
                calls,
                t.elapsed(),
                note,
            )
            .await?,
        );

        raw.begin().await?;
        let t = Instant::now();
        let mut full = 0;
        for _ in 0..calls {
            let start = rng.random_range(0..held0.len() - n);
            let chain = &held0[start..start + n];
            let l = store.probe(MODEL, chain).await?;
            let m = l
                .workers
                .iter()
                .find(|w| w.info.worker_id == w0)
                .map_or(0, |w| w.matched_blocks);
            if m == n {
                full += 1;
            }
        }
        let note = format!(
            "{full} of {calls} chains fully matched by w0; {} live workers",
            WORKERS
        );
        rows.push(
            end(
                raw,
                ScriptName::Probe,
                "lookup",
                hs.clone(),
                calls,
                t.elapsed(),
                note,
            )
            .await?,
        );

        raw.begin().await?;
        let t = Instant::now();
        let mut got = 0;
        for c in b.chunks(n) {
            got += store.evict(MODEL, &w0, c).await?;
        }
        let note = format!("removed {got} of {} held entries", b.len());
        rows.push(
            end(
                raw,
                ScriptName::Evict,
                "evict",
                hs.clone(),
                calls,
                t.elapsed(),
                note,
            )
            .await?,
        );

        // Unmeasured: drop the claimed-then-stored set to keep the background steady.
        for c in a.chunks(512) {
            store.evict(MODEL, &w0, c).await?;
        }
    }
    Ok(rows)
}

/// `sync_patch.lua` steps at budgets 1, 64, 128 and 512, per phase.
pub async fn patch_steps(
    raw: &mut Raw,
    store: &StateStore,
    rng: &mut StdRng,
) -> Result<Vec<Timing>> {
    let mut patch_rows = Vec::new();
    for budget in [1usize, 64, 128, 512] {
        sync_patch_steps(raw, store, rng, budget, 50_000, 2000, &mut patch_rows).await?;
    }
    Ok(patch_rows)
}

/// A worker `sync-b{budget}` holding `held` blocks, staged to a snapshot of
/// half of them plus as many new and committed by `sync_commit.lua` called
/// directly; then up to `cap` `sync_patch.lua` steps per phase are measured
/// into `rows` and the rest of the phase is run unmeasured.
async fn sync_patch_steps(
    raw: &mut Raw,
    store: &StateStore,
    rng: &mut StdRng,
    budget: usize,
    held: usize,
    cap: usize,
    rows: &mut Vec<Timing>,
) -> Result<()> {
    let id = format!("sync-b{budget}");
    let idx = register(store, &id).await?;
    let old = fresh(rng, held);
    store_all(store, &id, &old).await?;
    let mut snapshot: Vec<BlockHash> = old[..held / 2].to_vec();
    snapshot.extend(fresh(rng, held - held / 2));
    let sync_id = format!("bench{budget}");
    store.sync_stage(MODEL, &id, &sync_id, &snapshot).await?;

    let scripts = ScriptSet::new();
    let ids = store.keys().worker_ids(MODEL);
    let base = store.keys().model_base(MODEL);
    let ttl = store.ttls().confirmed.as_millis().to_string();
    let (committed, size, cidx): (u8, u64, u64) = scripts
        .call(
            &mut raw.conn,
            ScriptName::SyncCommit,
            &[&ids],
            &[
                base.as_bytes(),
                id.as_bytes(),
                sync_id.as_bytes(),
                ttl.as_bytes(),
            ],
        )
        .await?;
    ensure!(committed == 1 && cidx == idx, "sync commit failed");
    let wkey = format!("{base}:w:{idx}");
    let idx_s = idx.to_string();
    let budget_s = budget.to_string();
    let big = "512".to_string();

    // Each phase: measured for up to `cap` steps, the rest unmeasured.
    for phase in ["add", "remove"] {
        raw.begin().await?;
        let (mut calls, mut visited, mut done) = (0usize, 0u64, false);
        let t = Instant::now();
        while calls < cap {
            let p: Option<String> = raw.cmd(&["HGET", &wkey, "patch_phase"]).await?;
            if p.as_deref() != Some(phase) {
                break;
            }
            let (d, n): (u8, u64) = scripts
                .call(
                    &mut raw.conn,
                    ScriptName::SyncPatch,
                    &[&ids],
                    &[base.as_bytes(), idx_s.as_bytes(), budget_s.as_bytes()],
                )
                .await?;
            calls += 1;
            if d == 1 {
                done = true;
                break;
            }
            visited += n;
        }
        let wall = t.elapsed();
        let avg = visited as f64 / calls.max(1) as f64;
        let note = format!(
            "phase {phase}: {held} held, snapshot {} ({} kept, target {size}); avg {avg:.1} hashes visited/step{}",
            snapshot.len(),
            held / 2,
            if calls == cap { "; capped" } else { "" }
        );
        rows.push(
            end(
                raw,
                ScriptName::SyncPatch,
                &format!("sync_patch ({phase})"),
                format!("budget {budget}"),
                calls,
                wall,
                note,
            )
            .await?,
        );
        // Finish the phase unmeasured.
        while !done {
            let p: Option<String> = raw.cmd(&["HGET", &wkey, "patch_phase"]).await?;
            if p.as_deref() != Some(phase) {
                break;
            }
            let (d, _): (u8, u64) = scripts
                .call(
                    &mut raw.conn,
                    ScriptName::SyncPatch,
                    &[&ids],
                    &[base.as_bytes(), idx_s.as_bytes(), big.as_bytes()],
                )
                .await?;
            done = d == 1;
        }
    }
    let blocks: u64 = raw.cmd(&["SCARD", &reverse_key(idx)]).await?;
    ensure!(
        blocks == snapshot.len() as u64,
        "after patch worker holds {blocks}, expected {}",
        snapshot.len()
    );
    Ok(())
}
