//! Measures the Valkey cost of the shared state: memory per (block, worker)
//! entry, and server time per script call.
//!
//! Starts its own `valkey-server` (binary from `VALKEY_SERVER`, else
//! `valkey-server` on PATH) on a free loopback port without persistence,
//! drives it through `StateStore`, and prints a Markdown report to stdout
//! (progress goes to stderr). Run with `cargo bench --bench state_bench`;
//! `cargo bench --bench state_bench -- sync-check` runs section D alone.
//!
//! This file is the entry and the order of the run; the sections live in
//! `memory` (A), `timing` (B), `sync` (C) and `check` (D), their tables in
//! `report`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod check;
mod fixtures;
mod memory;
mod raw;
mod report;
mod setup;
mod sync;
mod timing;

use std::time::Instant;

use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use rand::rngs::StdRng;
use state::BatchLimits;

use crate::fixtures::new_store;
use crate::memory::{bucket_stats, memory_scenario};
use crate::raw::Raw;
use crate::setup::{Setup, loadavg};
use crate::sync::full_sync;

async fn run(url: &str, only_check: bool) -> Result<String> {
    let load_start = loadavg();
    let mut raw = Raw::connect(url).await?;
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut out = String::new();

    let setup = Setup::probe(&mut raw).await?;
    report::setup(&mut out, &setup, &load_start);

    // ----- D. Anti-entropy of an unchanged worker.
    eprintln!("timing: sync check of an unchanged 200k-entry worker");
    let check_store = new_store(url, BatchLimits::default())?;
    let check =
        check::unchanged_sync(&mut raw, &check_store, &mut rng, "check-200k", 200_000).await?;
    report::sync_check(&mut out, &check);
    if only_check {
        return Ok(out);
    }

    // ----- A. Memory.
    let t_all = Instant::now();
    let mut mem = Vec::new();
    let mut last = None;
    for (holders, entries) in [(2, 100_000), (2, 1_000_000), (1, 100_000), (1, 1_000_000)] {
        let (r, store, per, idxs) =
            memory_scenario(url, &mut raw, holders, entries, &mut rng).await?;
        mem.push(r);
        last = Some((store, per, idxs));
    }
    let Some((_fill_store, per, _idxs)) = last else {
        bail!("no memory scenario ran")
    };
    report::memory(&mut out, &mem);

    // ----- B. Server time per call, on top of the 1M-entry, 1-holder state.
    eprintln!("timing: script calls");
    let call_store = timing::call_store(url, &mut raw).await?;
    let rows = timing::script_calls(&mut raw, &call_store, &mut rng, &per[0]).await?;

    eprintln!("timing: sync_patch steps");
    let default_store = new_store(url, BatchLimits::default())?;
    let patch_rows = timing::patch_steps(&mut raw, &default_store, &mut rng).await?;

    // ----- C. Full sync of 200k over 200k held, half overlapping.
    eprintln!("timing: full 200k sync");
    let whole = full_sync(
        &mut raw,
        &default_store,
        &mut rng,
        "sync-200k",
        false,
        100_000,
    )
    .await?;
    eprintln!("timing: full 200k sync, stage and commit measured apart");
    let split = full_sync(
        &mut raw,
        &default_store,
        &mut rng,
        "sync-200k-split",
        true,
        100_000,
    )
    .await?;
    eprintln!("timing: steady-state 200k sync (1% churn), stage and commit measured apart");
    let steady = full_sync(
        &mut raw,
        &default_store,
        &mut rng,
        "sync-200k-steady",
        true,
        198_000,
    )
    .await?;

    // Bucket encodings after all the timing work.
    let buckets_end = bucket_stats(&mut raw).await?;

    // ----- Report B and C.
    report::timing(&mut out, &rows, &patch_rows);
    report::full_sync(&mut out, &whole, &split, &steady);
    report::end_of_run(&mut out, &buckets_end, t_all.elapsed(), &loadavg());
    Ok(out)
}

fn main() {
    let guard = match fleet::Valkey::start() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("state_bench: {e:#}");
            std::process::exit(1);
        }
    };
    eprintln!("valkey-server on 127.0.0.1:{}", guard.port());
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")
        .and_then(|rt| {
            let only_check = std::env::args().any(|a| a == "sync-check");
            rt.block_on(run(&guard.url(), only_check))
        });
    drop(guard);
    match result {
        Ok(report) => print!(
            "# State measurements: memory per entry and server time per script call\n\n{report}"
        ),
        Err(e) => {
            eprintln!("state_bench: {e:#}");
            std::process::exit(1);
        }
    }
}
