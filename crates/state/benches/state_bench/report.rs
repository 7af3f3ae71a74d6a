//! The Markdown report: the section texts and tables, written from the
//! results the sections measured. Only formatting; nothing here talks to the
//! server.

use std::fmt::Write as _;
use std::time::Duration;

use state::ScriptName;

use crate::fixtures::{FILL_BATCH, MODEL, NS, WORKERS};
use crate::memory::{BucketStats, MemResult};
use crate::setup::Setup;
use crate::sync::SyncRun;
use crate::timing::Timing;

fn lat_cols(lat: Option<[f64; 3]>) -> String {
    match lat {
        Some([a, b, c]) => format!("{a:.0} | {b:.0} | {c:.0}"),
        None => "- | - | -".into(),
    }
}

fn slow_col(slow: &[u64]) -> String {
    match slow.last() {
        Some(max) => format!("{} (max {max})", slow.len()),
        None => "0".into(),
    }
}
/// One row per `Timing`: commandstats, latency percentiles, slowlog, wall.
fn timing_table(out: &mut String, rows: &[Timing]) {
    let _ = writeln!(
        out,
        "| script | hashes/call | calls | **usec_per_call** (commandstats) | p50 usec | p99 usec | max usec (p100) | calls > 1 ms (exact max usec) | client wall/call usec | note |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in rows {
        let wall = r.wall.as_secs_f64() * 1e6 / r.expected_calls.max(1) as f64;
        let _ = writeln!(
            out,
            "| {} | {} | {} | **{:.2}** | {} | {} | {:.1} | {} |",
            r.label,
            r.hashes,
            r.stat.calls,
            r.stat.usec_per_call,
            lat_cols(r.lat),
            slow_col(&r.slow),
            wall,
            r.note
        );
    }
}

/// `## Setup`: server, config, calibration, host and bench parameters.
pub fn setup(out: &mut String, setup: &Setup, load_start: &str) {
    let Setup {
        version,
        allocator,
        calib,
        cfg,
    } = setup;
    let _ = writeln!(out, "## Setup\n");
    let _ = writeln!(
        out,
        "- Valkey {version} ({allocator}), started by the bench on 127.0.0.1 with `--save \"\" --appendonly no`; client and server on the same host (loopback)."
    );
    let _ = writeln!(out, "- Server config: {}.", cfg.join(", "));
    let _ = writeln!(
        out,
        "- Calibration: an EVAL looping 10,000 × `redis.call('PING')` costs {} usec per iteration (3 runs).",
        calib.join(" / ")
    );
    let _ = writeln!(
        out,
        "- {} CPUs (available_parallelism); /proc/loadavg at start: `{load_start}`.",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(
        out,
        "- Key prefix `{NS}`, model `{MODEL}`, {WORKERS} workers `w0`..`w7`; worker lease 1 h, other TTLs default; random 64-bit block hashes (seeded StdRng)."
    );
    let _ = writeln!(
        out,
        "- Entries inserted with `StateStore::stored` in batches of {FILL_BATCH} hashes (split by the store into calls of 256)."
    );
}

/// `## A. Memory per (block, worker) entry` and its sub-tables.
pub fn memory(out: &mut String, mem: &[MemResult]) {
    let _ = writeln!(out, "\n## A. Memory per (block, worker) entry\n");
    let _ = writeln!(
        out,
        "`used_memory` (INFO memory, after `MEMORY PURGE`) right before and right after the fill, on an otherwise empty server (FLUSHALL SYNC, then 8 workers registered and the scripts loaded before the baseline; SLOWLOG disabled during this section so that its entries do not count). An entry is one (block, worker) pair: with 2 holders per block, N entries are N/2 blocks.\n"
    );
    let _ = writeln!(
        out,
        "| layout | entries | blocks | used_memory before | after | delta | **bytes/entry** | bytes/block | used_memory_dataset delta | Σ MEMORY USAGE buckets | Σ MEMORY USAGE reverse sets | Σ MEMORY USAGE / entry | fill time s |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in mem {
        let rev: u64 = r.reverse.iter().map(|k| k.memory_usage).sum();
        let e = r.entries as f64;
        let _ = writeln!(
            out,
            "| {} worker(s)/block | {} | {} | {} | {} | {} | **{:.1}** | {:.1} | {} | {} | {} | {:.1} | {:.1} |",
            r.holders,
            r.entries,
            r.blocks,
            r.before,
            r.after,
            r.delta(),
            r.delta() as f64 / e,
            r.delta() as f64 / r.blocks as f64,
            r.dataset_after as i64 - r.dataset_before as i64,
            r.buckets.memory_usage_total,
            rev,
            (r.buckets.memory_usage_total + rev) as f64 / e,
            r.fill_secs
        );
    }
    let _ = writeln!(out, "\n### Forward buckets and reverse sets\n");
    let _ = writeln!(
        out,
        "| layout | entries | keys (DBSIZE) | non-empty buckets | fields/bucket min / avg / max | bucket encodings | reverse set members | reverse set encoding | MEMORY USAGE per reverse set |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|---|---|---|---|");
    for r in mem {
        let b = &r.buckets;
        let encs: Vec<String> = b
            .encodings
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let members: Vec<String> = r.reverse.iter().map(|k| k.len.to_string()).collect();
        let mut rencs: Vec<String> = r.reverse.iter().map(|k| k.encoding.clone()).collect();
        rencs.dedup();
        let usage: Vec<String> = r
            .reverse
            .iter()
            .map(|k| k.memory_usage.to_string())
            .collect();
        let _ = writeln!(
            out,
            "| {} worker(s)/block | {} | {} | {} | {} / {:.1} / {} | {} | {} | {} | {} |",
            r.holders,
            r.entries,
            r.dbsize,
            b.non_empty,
            b.fields_min,
            b.fields_total as f64 / b.non_empty.max(1) as f64,
            b.fields_max,
            encs.join(", "),
            members.join(", "),
            rencs.join(", "),
            usage.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\n### Sample keys (`MEMORY USAGE <key> SAMPLES 0`, `OBJECT ENCODING`)\n"
    );
    let _ = writeln!(
        out,
        "| layout | entries | key | type | fields / members | encoding | MEMORY USAGE bytes |"
    );
    let _ = writeln!(out, "|---|---:|---|---|---:|---|---:|");
    for r in mem {
        let rows = r
            .samples
            .iter()
            .map(|k| (k, "hash (forward bucket)"))
            .chain(r.reverse.iter().take(1).map(|k| (k, "set (reverse map)")));
        for (k, ty) in rows {
            let _ = writeln!(
                out,
                "| {} worker(s)/block | {} | `{}` | {} | {} | {} | {} |",
                r.holders, r.entries, k.key, ty, k.len, k.encoding, k.memory_usage
            );
        }
    }
    let _ = writeln!(out, "\nSample forward values (field = value):\n");
    for r in mem {
        let _ = writeln!(
            out,
            "- {} worker(s)/block, {} entries: `{}`",
            r.holders, r.entries, r.sample_value
        );
    }
}

/// `## B. Server time per script call` and `### One sync_patch step`.
pub fn timing(out: &mut String, rows: &[Timing], patch_rows: &[Timing]) {
    let _ = writeln!(out, "\n## B. Server time per script call\n");
    let _ = writeln!(
        out,
        "Background state: the 1M-entry, 1-worker-per-block state of section A (1,000,000 blocks over 8 workers, ~122 fields per forward bucket). Each row is one script and one batch size measured alone: `CONFIG RESETSTAT` + `SLOWLOG RESET`, the calls (sequential, one at a time), then `INFO commandstats` (`cmdstat_fcall`, or `cmdstat_fcall_ro` for lookup). p50/p99/max are the `INFO latencystats` percentiles of the same command (p100 = max; HDR histogram, ~1% resolution); calls > 1 ms are counted from SLOWLOG (`slowlog-log-slower-than 1000`, exact usec), filtered by the function name. SLOWLOG is deliberately not set to 0: it also logs every `redis.call` inside a script, and that logging runs inside the script's time (it nearly doubled a test script's time on this machine). The store was built with `BatchLimits {{ hashes_per_call: 512, .. }}` so every batch is exactly one FCALL. Client wall/call is the round trip seen by `StateStore` (loopback, includes client work).\n"
    );
    let _ = writeln!(
        out,
        "Workloads: claim = N hashes new to the index (all inserted); stored (promote) = the same hashes, now speculative, confirmed; stored (insert) = N hashes new to the index; lookup = a chain of N hashes all held (confirmed) by w0, 8 live workers; evict = N hashes w0 holds (all removed).\n"
    );
    timing_table(out, rows);

    let _ = writeln!(out, "\n### One sync_patch step\n");
    let _ = writeln!(
        out,
        "A worker holding 50,000 blocks is synced to a snapshot of 50,000 (25,000 kept, 25,000 new): staged with `sync_stage`, committed with `sync_commit.lua` called directly (so the store does not patch), then `sync_patch.lua` steps with the given budget (SSCAN COUNT) are measured per phase, at most 2000 steps per phase (the rest of the phase is run unmeasured). The add phase walks the target set (50,000); the remove phase walks the reverse map (75,000: old + new).\n"
    );
    timing_table(out, patch_rows);
}

/// `## C. Full sync of 200,000 hashes`: runs 1 (`whole`), 2 (`split`) and
/// 3 (`steady`).
/// Section D's table.
pub fn sync_check(out: &mut String, run: &crate::check::CheckRun) {
    let _ = writeln!(out, "\n## D. Anti-entropy of an unchanged worker\n");
    let _ = writeln!(
        out,
        "A worker holding {} confirmed entries. Its periodic sync first sends the 256 digests of its snapshot (`sync_check.lua`); when a few buckets differ it repairs those alone (`StateStore::sync_repair`: a bucket that differs by one block names it by the XOR of the digests; others are read from the 32 forward buckets each covers (`HGETALL`); `stored.lua` adds the missing blocks, `sync_repair.lua` removes the gone ones); only when many differ does it send the snapshot. For comparison, the full sync of the same (unchanged) snapshot, which is what every period cost before. Server time from `INFO commandstats` (FCALL; for repairs also HGET, HMGET, SMISMEMBER and HGETALL) over each call alone.\n",
        run.entries
    );
    let _ = writeln!(
        out,
        "| measured call | wall ms | FCALL calls | **server usec total** | usec per call |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    for part in &run.parts {
        let calls = part.w.stat.calls;
        let _ = writeln!(
            out,
            "| {} | {:.2} | {} | **{}** | {:.1} |",
            part.label,
            part.wall.as_secs_f64() * 1e3,
            calls,
            part.w.stat.usec,
            part.w.stat.usec as f64 / calls.max(1) as f64
        );
    }
}

pub fn full_sync(out: &mut String, whole: &SyncRun, split: &SyncRun, steady: &SyncRun) {
    let _ = writeln!(out, "\n## C. Full sync of 200,000 hashes\n");
    let _ = writeln!(
        out,
        "A worker holding 200,000 confirmed blocks is synced to a snapshot of 200,000. Runs 1 and 2: 100,000 of the held blocks plus 100,000 new (50% churn, a worst case). Run 3: 198,000 held plus 2,000 new (1% churn, the steady state of a 5 s snapshot). Store with default `BatchLimits` (see the `ttl.rs` defaults: stage and patch step sizes). Background: the state of section B. Run 1 is one `StateStore::sync()` call measured as a whole; runs 2 and 3 (other workers) call `sync_stage()` and `sync_commit()` (= commit + all patch steps) with separate stat windows, so the time is attributable. Calls > 1 ms are from SLOWLOG (`slowlog-log-slower-than 1000`), exact usec, attributed by script SHA.\n"
    );
    let _ = writeln!(
        out,
        "| run | measured call | wall s | FCALL calls | server usec total | **usec_per_call** | p50 | p99 | max (p100) | server / wall | calls > 1 ms by script (exact max usec) |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (run, r) in [("1", whole), ("2", split), ("3", steady)] {
        for part in &r.parts {
            let slow: Vec<String> = [
                ScriptName::SyncStage,
                ScriptName::SyncCommit,
                ScriptName::SyncPatch,
            ]
            .into_iter()
            .filter_map(|sc| {
                let d = part.w.slow_of(sc);
                d.last()
                    .map(|m| format!("{}: {} (max {m})", sc.file(), d.len()))
            })
            .collect();
            let wall = part.wall.as_secs_f64();
            let _ = writeln!(
                out,
                "| {run} | {} | {:.3} | {} | {} | **{:.2}** | {} | {:.1} % | {} |",
                part.label,
                wall,
                part.w.stat.calls,
                part.w.stat.usec,
                part.w.stat.usec_per_call,
                lat_cols(part.w.lat),
                part.w.stat.usec as f64 / wall / 1e4,
                if slow.is_empty() {
                    "none".to_owned()
                } else {
                    slow.join("; ")
                }
            );
        }
    }
    for (run, r) in [("1", whole), ("2", split), ("3", steady)] {
        let _ = writeln!(
            out,
            "\nRun {run}: worker holds {} blocks afterwards (SyncOutcome.active {}); total wall {:.3} s over {} FCALL calls.",
            r.held_after,
            r.active,
            r.parts.iter().map(|p| p.wall.as_secs_f64()).sum::<f64>(),
            r.parts.iter().map(|p| p.w.stat.calls).sum::<u64>()
        );
    }
}

/// `## Forward buckets at the end of the run` and the closing line.
pub fn end_of_run(out: &mut String, buckets_end: &BucketStats, elapsed: Duration, load_end: &str) {
    let _ = writeln!(out, "\n## Forward buckets at the end of the run\n");
    let encs: Vec<String> = buckets_end
        .encodings
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let _ = writeln!(
        out,
        "{} non-empty buckets, fields/bucket min {} / avg {:.1} / max {}; encodings: {}.",
        buckets_end.non_empty,
        buckets_end.fields_min,
        buckets_end.fields_total as f64 / buckets_end.non_empty.max(1) as f64,
        buckets_end.fields_max,
        encs.join(", ")
    );
    let _ = writeln!(
        out,
        "\nTotal bench run time: {:.1} s. /proc/loadavg at end: `{}`.",
        elapsed.as_secs_f64(),
        load_end
    );
}
