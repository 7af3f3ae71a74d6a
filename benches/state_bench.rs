//! Measures the Valkey cost of the shared state: memory per (block, worker)
//! entry, and server time per script call.
//!
//! Starts its own `valkey-server` (binary from `VALKEY_SERVER`, else
//! `valkey-server` on PATH) on a free loopback port without persistence,
//! drives it through `StateStore`, and prints a Markdown report to stdout
//! (progress goes to stderr). Run with `cargo bench --bench state_bench`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use prefix_router::hashing::BlockHash;
use prefix_router::state::{
    BatchLimits, ConnectionSettings, ScriptName, ScriptSet, StateStore, StateTtls, WorkerHeartbeat,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;
use redis::aio::MultiplexedConnection;

const NS: &str = "bench";
const MODEL: &str = "bench-model";
const WORKERS: usize = 8;
const FILL_BATCH: usize = 4096;

// ---------------------------------------------------------------------------
// The valkey-server child process.

/// A valkey-server child; killed (and reaped) on drop, also on panic.
struct ValkeyGuard {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl ValkeyGuard {
    fn start() -> Result<Self> {
        let port = free_port()?;
        let dir = tempfile::tempdir().context("tempdir")?;
        let bin = std::env::var("VALKEY_SERVER").unwrap_or_else(|_| "valkey-server".into());
        let child = Command::new(&bin)
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {bin} (run scripts/install-deps.sh)"))?;
        let guard = ValkeyGuard {
            child,
            port,
            _dir: dir,
        };
        guard.wait_ready()?;
        Ok(guard)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&self) -> Result<()> {
        let client = redis::Client::open(self.url())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut c) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("valkey-server on port {} did not start", self.port)
    }
}

impl Drop for ValkeyGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free ephemeral port on 127.0.0.1 (bound, then released); never 6379.
fn free_port() -> Result<u16> {
    for _ in 0..16 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port != 6379 {
            return Ok(port);
        }
    }
    bail!("no free port")
}

// ---------------------------------------------------------------------------
// Raw access to the server: INFO, CONFIG, SLOWLOG, MEMORY.

struct Raw {
    conn: MultiplexedConnection,
}

#[derive(Debug, Clone, Copy, Default)]
struct CmdStat {
    calls: u64,
    usec: u64,
    usec_per_call: f64,
    failed_calls: u64,
}

fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

impl Raw {
    async fn connect(url: &str) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(Duration::from_secs(120)));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Raw { conn })
    }

    async fn cmd<T: redis::FromRedisValue>(&mut self, args: &[&str]) -> Result<T> {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query_async(&mut self.conn)
            .await
            .with_context(|| args.join(" "))
    }

    async fn info(&mut self, section: &str) -> Result<BTreeMap<String, String>> {
        let text: String = self.cmd(&["INFO", section]).await?;
        Ok(parse_info(&text))
    }

    async fn info_u64(&mut self, section: &str, field: &str) -> Result<u64> {
        self.info(section)
            .await?
            .get(field)
            .with_context(|| format!("INFO {section} has no {field}"))?
            .parse()
            .with_context(|| format!("INFO {section} {field}"))
    }

    async fn config_get(&mut self, name: &str) -> Result<String> {
        let v: Vec<String> = self.cmd(&["CONFIG", "GET", name]).await?;
        Ok(v.get(1).cloned().unwrap_or_default())
    }

    /// `used_memory` after MEMORY PURGE (jemalloc) and a short settle.
    async fn used_memory(&mut self) -> Result<u64> {
        let _: Value = self.cmd(&["MEMORY", "PURGE"]).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.info_u64("memory", "used_memory").await
    }

    async fn command_stats(&mut self) -> Result<BTreeMap<String, CmdStat>> {
        let info = self.info("commandstats").await?;
        let mut out = BTreeMap::new();
        for (k, v) in info {
            let Some(name) = k.strip_prefix("cmdstat_") else {
                continue;
            };
            let mut s = CmdStat::default();
            for kv in v.split(',') {
                match kv.split_once('=') {
                    Some(("calls", x)) => s.calls = x.parse()?,
                    Some(("usec", x)) => s.usec = x.parse()?,
                    Some(("usec_per_call", x)) => s.usec_per_call = x.parse()?,
                    Some(("failed_calls", x)) => s.failed_calls = x.parse()?,
                    _ => {}
                }
            }
            out.insert(name.to_owned(), s);
        }
        Ok(out)
    }

    /// Every SLOWLOG entry: (duration in usec, arguments as logged).
    async fn slowlog(&mut self) -> Result<Vec<(u64, Vec<String>)>> {
        let v: Value = self.cmd(&["SLOWLOG", "GET", "-1"]).await?;
        let Value::Array(entries) = v else {
            bail!("SLOWLOG GET: unexpected reply {v:?}")
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let Value::Array(f) = e else { continue };
            let (Some(dur), Some(Value::Array(args))) = (f.get(2).and_then(as_i64), f.get(3))
            else {
                continue;
            };
            let args = args.iter().filter_map(as_string).collect();
            out.push((u64::try_from(dur).unwrap_or(0), args));
        }
        Ok(out)
    }

    /// p50, p99 and p100 of `cmd` from INFO latencystats (usec; HDR
    /// histogram, ~1% resolution); needs latency-tracking-info-percentiles
    /// "50 99 100".
    async fn latency(&mut self, cmd: &str) -> Result<Option<[f64; 3]>> {
        let info = self.info("latencystats").await?;
        let Some(v) = info.get(&format!("latency_percentiles_usec_{cmd}")) else {
            return Ok(None);
        };
        let mut out = [f64::NAN; 3];
        for kv in v.split(',') {
            match kv.split_once('=') {
                Some(("p50", x)) => out[0] = x.parse()?,
                Some(("p99", x)) => out[1] = x.parse()?,
                Some(("p100", x)) => out[2] = x.parse()?,
                _ => {}
            }
        }
        Ok(Some(out))
    }

    /// Starts a measurement window: fresh command and latency stats, and an
    /// empty slowlog.
    async fn begin(&mut self) -> Result<()> {
        let _: Value = self.cmd(&["SLOWLOG", "RESET"]).await?;
        let _: Value = self.cmd(&["CONFIG", "RESETSTAT"]).await?;
        Ok(())
    }

    /// Ends a window: stats of `cmd` (evalsha or evalsha_ro) and the slowlog
    /// entries (calls over 1 ms) as (usec, sha).
    async fn window(&mut self, cmd: &str) -> Result<Window> {
        let stat = self
            .command_stats()
            .await?
            .get(cmd)
            .copied()
            .unwrap_or_default();
        let lat = self.latency(cmd).await?;
        let slow = self
            .slowlog()
            .await?
            .into_iter()
            .filter(|(_, a)| a.first().is_some_and(|c| c.eq_ignore_ascii_case(cmd)))
            .map(|(d, a)| (d, a.get(1).cloned().unwrap_or_default().to_lowercase()))
            .collect();
        Ok(Window { stat, lat, slow })
    }
}

/// What one measurement window saw of one command.
struct Window {
    stat: CmdStat,
    lat: Option<[f64; 3]>,
    slow: Vec<(u64, String)>,
}

impl Window {
    /// Sorted durations of the logged (over 1 ms) calls of `script`.
    fn slow_of(&self, script: ScriptName) -> Vec<u64> {
        let sha = sha_of(script);
        let mut d: Vec<u64> = self
            .slow
            .iter()
            .filter(|(_, s)| *s == sha)
            .map(|(d, _)| *d)
            .collect();
        d.sort_unstable();
        d
    }
}

// ---------------------------------------------------------------------------
// Helpers on the state.

fn sha_of(script: ScriptName) -> String {
    let set = ScriptSet::new();
    redis::Script::new(set.source(script)).get_hash().to_owned()
}

fn bucket_key(h: BlockHash) -> String {
    let hex = h.to_hex();
    let d = u8::from_str_radix(&hex[3..4], 16).unwrap_or(0) & !3;
    format!("{NS}:{{{MODEL}}}:f:{}{:x}", &hex[..3], d)
}

fn reverse_key(idx: u64) -> String {
    format!("{NS}:{{{MODEL}}}:r:{idx}")
}

fn all_bucket_keys() -> Vec<String> {
    (0..16384u32)
        .map(|i| format!("{NS}:{{{MODEL}}}:f:{:03x}{:x}", i >> 2, (i & 3) * 4))
        .collect()
}

fn fresh(rng: &mut StdRng, n: usize) -> Vec<BlockHash> {
    (0..n).map(|_| BlockHash(rng.random())).collect()
}

fn new_store(url: &str, limits: BatchLimits) -> Result<StateStore> {
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

fn worker_id(i: usize) -> String {
    format!("w{i}")
}

/// Registers a worker; returns its incarnation.
async fn register(store: &StateStore, id: &str) -> Result<u64> {
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
async fn store_all(store: &StateStore, worker: &str, hashes: &[BlockHash]) -> Result<u64> {
    let mut inserted = 0;
    for chunk in hashes.chunks(FILL_BATCH) {
        inserted += store.stored(MODEL, worker, chunk).await?.inserted;
    }
    Ok(inserted)
}

/// Fills `entries` (block, worker) entries over the 8 workers, each block
/// held by `holders` workers; returns the hashes each worker holds.
async fn fill(
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

// ---------------------------------------------------------------------------
// A. Memory.

#[derive(Default)]
struct BucketStats {
    non_empty: u64,
    fields_min: u64,
    fields_max: u64,
    fields_total: u64,
    encodings: BTreeMap<String, u64>,
    memory_usage_total: u64,
}

async fn bucket_stats(raw: &mut Raw) -> Result<BucketStats> {
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

struct KeyInfo {
    key: String,
    len: u64,
    encoding: String,
    memory_usage: u64,
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

struct MemResult {
    holders: usize,
    entries: usize,
    blocks: usize,
    before: u64,
    after: u64,
    dataset_before: u64,
    dataset_after: u64,
    fill_secs: f64,
    buckets: BucketStats,
    reverse: Vec<KeyInfo>,
    samples: Vec<KeyInfo>,
    sample_value: String,
    dbsize: u64,
}

impl MemResult {
    fn delta(&self) -> i64 {
        self.after as i64 - self.before as i64
    }
}

async fn memory_scenario(
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

// ---------------------------------------------------------------------------
// B. Server time per call.

struct Timing {
    label: String,
    hashes: String,
    expected_calls: usize,
    stat: CmdStat,
    lat: Option<[f64; 3]>,
    /// Exact durations of this script's calls over 1 ms (slowlog), sorted.
    slow: Vec<u64>,
    wall: Duration,
    note: String,
}

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
    let cmd = if matches!(script, ScriptName::Lookup | ScriptName::Workers) {
        "evalsha_ro"
    } else {
        "evalsha"
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
            &[&base, &id, &sync_id, &ttl],
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
                    &[&base, &idx_s, &budget_s],
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
                    &[&base, &idx_s, &big],
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

struct SyncPart {
    label: &'static str,
    wall: Duration,
    w: Window,
}

struct SyncRun {
    parts: Vec<SyncPart>,
    active: u64,
    held_after: u64,
}

/// A worker holding 200k blocks synced to 200k (`kept` of them kept, the rest
/// new); as one `sync()` call, or (`split`) as `sync_stage()` then `sync_commit()`.
async fn full_sync(
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
            w: raw.window("evalsha").await?,
        });
        raw.begin().await?;
        let t = Instant::now();
        let active = store.sync_commit(MODEL, id, sync_id).await?.active;
        let wall = t.elapsed();
        parts.push(SyncPart {
            label: "sync_commit() (commit + patch steps)",
            wall,
            w: raw.window("evalsha").await?,
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
            w: raw.window("evalsha").await?,
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

// ---------------------------------------------------------------------------
// The run.

/// `/proc/loadavg` (Linux), to show whether other work shared the CPUs.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unavailable".into())
}

async fn run(url: &str) -> Result<String> {
    let load_start = loadavg();
    let mut raw = Raw::connect(url).await?;
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut out = String::new();

    let server = raw.info("server").await?;
    let version = server
        .get("valkey_version")
        .or_else(|| server.get("redis_version"))
        .cloned()
        .unwrap_or_default();
    let allocator = raw
        .info("memory")
        .await?
        .get("mem_allocator")
        .cloned()
        .unwrap_or_default();
    // The slowlog is off while memory is measured (its entries live in
    // used_memory); section B turns it on for calls over 1 ms.
    for (k, v) in [
        ("slowlog-log-slower-than", "-1"),
        ("slowlog-max-len", "100000"),
        ("latency-tracking-info-percentiles", "50 99 100"),
    ] {
        let _: Value = raw.cmd(&["CONFIG", "SET", k, v]).await?;
    }
    let mut calib = Vec::new();
    for _ in 0..3 {
        let _: Value = raw.cmd(&["CONFIG", "RESETSTAT"]).await?;
        let _: Value = raw
            .cmd(&[
                "EVAL",
                "for i = 1, 10000 do redis.call('PING') end return 1",
                "0",
            ])
            .await?;
        let us = raw.command_stats().await?.get("eval").map_or(0, |s| s.usec);
        calib.push(format!("{:.2}", us as f64 / 10_000.0));
    }
    let mut cfg = Vec::new();
    for name in [
        "hash-max-listpack-entries",
        "hash-max-listpack-value",
        "set-max-listpack-entries",
        "set-max-listpack-value",
        "set-max-intset-entries",
        "maxmemory",
        "lazyfree-lazy-user-flush",
        "latency-tracking",
    ] {
        cfg.push(format!("`{name}` = {}", raw.config_get(name).await?));
    }
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
    for r in &mem {
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
    for r in &mem {
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
    for r in &mem {
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
    for r in &mem {
        let _ = writeln!(
            out,
            "- {} worker(s)/block, {} entries: `{}`",
            r.holders, r.entries, r.sample_value
        );
    }

    // ----- B. Server time per call, on top of the 1M-entry, 1-holder state.
    eprintln!("timing: script calls");
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
    let w0 = worker_id(0);
    let held0 = &per[0];
    // Warm both lanes.
    store.lookup(MODEL, &held0[..1]).await?;
    store.stored(MODEL, &w0, &[]).await?;

    let mut rows = Vec::new();
    for (n, calls) in [(1usize, 2000usize), (64, 2000), (128, 1000), (512, 500)] {
        let a = fresh(&mut rng, n * calls);
        let b = fresh(&mut rng, n * calls);
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
                &mut raw,
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
                &mut raw,
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
                &mut raw,
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
            let l = store.lookup(MODEL, chain).await?;
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
                &mut raw,
                ScriptName::Lookup,
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
                &mut raw,
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

    eprintln!("timing: sync_patch steps");
    let default_store = new_store(url, BatchLimits::default())?;
    let mut patch_rows = Vec::new();
    for budget in [1usize, 64, 128, 512] {
        sync_patch_steps(
            &mut raw,
            &default_store,
            &mut rng,
            budget,
            50_000,
            2000,
            &mut patch_rows,
        )
        .await?;
    }

    // ----- Full sync of 200k over 200k held, half overlapping.
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

    // ----- Report B.
    let _ = writeln!(out, "\n## B. Server time per script call\n");
    let _ = writeln!(
        out,
        "Background state: the 1M-entry, 1-worker-per-block state of section A (1,000,000 blocks over 8 workers, ~122 fields per forward bucket). Each row is one script and one batch size measured alone: `CONFIG RESETSTAT` + `SLOWLOG RESET`, the calls (sequential, one at a time), then `INFO commandstats` (`cmdstat_evalsha`, or `cmdstat_evalsha_ro` for lookup). p50/p99/max are the `INFO latencystats` percentiles of the same command (p100 = max; HDR histogram, ~1% resolution); calls > 1 ms are counted from SLOWLOG (`slowlog-log-slower-than 1000`, exact usec), filtered by the script's SHA. SLOWLOG is deliberately not set to 0: it also logs every `redis.call` inside a script, and that logging runs inside the script's time (it nearly doubled a test script's time on this machine). The store was built with `BatchLimits {{ hashes_per_call: 512, .. }}` so every batch is exactly one EVALSHA. Client wall/call is the round trip seen by `StateStore` (loopback, includes client work).\n"
    );
    let _ = writeln!(
        out,
        "Workloads: claim = N hashes new to the index (all inserted); stored (promote) = the same hashes, now speculative, confirmed; stored (insert) = N hashes new to the index; lookup = a chain of N hashes all held (confirmed) by w0, 8 live workers; evict = N hashes w0 holds (all removed).\n"
    );
    timing_table(&mut out, &rows);

    let _ = writeln!(out, "\n### One sync_patch step\n");
    let _ = writeln!(
        out,
        "A worker holding 50,000 blocks is synced to a snapshot of 50,000 (25,000 kept, 25,000 new): staged with `sync_stage`, committed with `sync_commit.lua` called directly (so the store does not patch), then `sync_patch.lua` steps with the given budget (SSCAN COUNT) are measured per phase, at most 2000 steps per phase (the rest of the phase is run unmeasured). The add phase walks the target set (50,000); the remove phase walks the reverse map (75,000: old + new).\n"
    );
    timing_table(&mut out, &patch_rows);

    let _ = writeln!(out, "\n## C. Full sync of 200,000 hashes\n");
    let _ = writeln!(
        out,
        "A worker holding 200,000 confirmed blocks is synced to a snapshot of 200,000. Runs 1 and 2: 100,000 of the held blocks plus 100,000 new (50% churn, a worst case). Run 3: 198,000 held plus 2,000 new (1% churn, the steady state of a 5 s snapshot). Store with default `BatchLimits` (see the `ttl.rs` defaults: stage and patch step sizes). Background: the state of section B. Run 1 is one `StateStore::sync()` call measured as a whole; runs 2 and 3 (other workers) call `sync_stage()` and `sync_commit()` (= commit + all patch steps) with separate stat windows, so the time is attributable. Calls > 1 ms are from SLOWLOG (`slowlog-log-slower-than 1000`), exact usec, attributed by script SHA.\n"
    );
    let _ = writeln!(
        out,
        "| run | measured call | wall s | EVALSHA calls | server usec total | **usec_per_call** | p50 | p99 | max (p100) | server / wall | calls > 1 ms by script (exact max usec) |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (run, r) in [("1", &whole), ("2", &split), ("3", &steady)] {
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
    for (run, r) in [("1", &whole), ("2", &split), ("3", &steady)] {
        let _ = writeln!(
            out,
            "\nRun {run}: worker holds {} blocks afterwards (SyncOutcome.active {}); total wall {:.3} s over {} EVALSHA calls.",
            r.held_after,
            r.active,
            r.parts.iter().map(|p| p.wall.as_secs_f64()).sum::<f64>(),
            r.parts.iter().map(|p| p.w.stat.calls).sum::<u64>()
        );
    }

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
        t_all.elapsed().as_secs_f64(),
        loadavg()
    );
    Ok(out)
}

fn main() {
    let guard = match ValkeyGuard::start() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("state_bench: {e:#}");
            std::process::exit(1);
        }
    };
    eprintln!("valkey-server on 127.0.0.1:{}", guard.port);
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")
        .and_then(|rt| rt.block_on(run(&guard.url())));
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
