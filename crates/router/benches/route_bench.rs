//! The routing decision's cost: tokenize + hash + the atomic Valkey call,
//! for 1k, 8k and 32k-token prompts, cold (a prefix never seen) and warm
//! (a seen prefix, new question), and warm with three quarters of the prefix
//! on its worker's CPU tier (the route then bisects for the GPU depth),
//! plus Valkey server time per routed request (exact per call, from `INFO
//! commandstats` deltas).
//!
//! `cargo bench --bench route_bench`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use prefix_router::routing::CacheAwareConfig;
use protocol::hashing::{BlockHash, HashSeed};
use state::{BatchLimits, ConnectionSettings, StateStore, StateTtls, WorkerHeartbeat};
use tokenize::ModelPipeline;

const MODEL: &str = "bench";
/// Decisions per cold row (each new prompt is tokenized in full).
const RUNS: usize = 41;
/// Decisions per warm row: cheap to prepare, and more of them steady the
/// server-time median.
const WARM_RUNS: usize = 401;
const ROUTER: &str = "bench-router";

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Varied text of `lines` lines, distinct per `seed`.
fn text(lines: usize, seed: usize) -> String {
    let words = [
        "cache", "prefix", "router", "token", "block", "worker", "valkey", "stream", "latency",
        "hash",
    ];
    let mut out = String::new();
    let mut i = 0;
    while i < lines {
        out.push_str(&format!(
            "Line {seed}-{i}: the {} of the {} is {}.\n",
            words[(i + seed) % 10],
            words[(i * 3) % 10],
            i * 7 + seed
        ));
        i += 1;
    }
    out
}

/// One prompt, tokenized and hashed, with the time each step took.
struct Prepared {
    tokens: usize,
    hashes: Vec<BlockHash>,
    tokenize: Duration,
    hash: Duration,
}

fn prepare(pipeline: &ModelPipeline, prompt: &str) -> Result<Prepared> {
    let t = Instant::now();
    let ids = pipeline.tokenizer.encode(prompt, true)?;
    let tokenize = t.elapsed();
    let hashes = pipeline.block_hashes(&ids, None, None);
    Ok(Prepared {
        tokens: ids.len(),
        hashes,
        tokenize,
        hash: t.elapsed() - tokenize,
    })
}

/// What one routing call did: its wall time, and where the tail claim the
/// proxy makes off the critical path starts.
struct Routed {
    wall: Duration,
    worker: Option<String>,
    tail_from: usize,
}

/// The Valkey part of one decision, the call the proxy makes
/// (`StateStore::route_chain`: a read-only probe when the chain is longer
/// than the routed head, then the atomic route call).
async fn route(store: &StateStore, p: &Prepared) -> Result<Routed> {
    let t = Instant::now();
    let params = CacheAwareConfig {
        epsilon: 1000.0,
        ..CacheAwareConfig::default()
    }
    .route_params(p.tokens as u64, 16, 1);
    let o = store.route_chain(MODEL, &p.hashes, &params, &[]).await?;
    let wall = t.elapsed();
    let worker = o.chosen.map(|i| o.lookup.workers[i].info.worker_id.clone());
    Ok(Routed {
        wall,
        worker,
        tail_from: o.tail_from,
    })
}

/// Server-side statistics of the script calls in one window.
struct Window {
    calls: u64,
    usec: u64,
    p50: f64,
    p99: f64,
}

/// A raw connection for statistics and the bench's own bookkeeping.
struct Stats {
    conn: redis::aio::MultiplexedConnection,
}

impl Stats {
    async fn reset(&mut self) -> Result<()> {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut self.conn)
            .await?;
        Ok(())
    }

    /// FCALL and FCALL_RO since the last reset: calls and usec from `INFO
    /// commandstats`, p50/p99 from `INFO latencystats` (FCALL only).
    async fn window(&mut self) -> Result<Window> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("latencystats")
            .query_async(&mut self.conn)
            .await?;
        let mut w = Window {
            calls: 0,
            usec: 0,
            p50: 0.0,
            p99: 0.0,
        };
        for line in info.lines() {
            let Some((name, fields)) = line.split_once(':') else {
                continue;
            };
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            match name {
                "cmdstat_fcall" | "cmdstat_fcall_ro" => {
                    w.calls += field("calls") as u64;
                    w.usec += field("usec") as u64;
                }
                "latency_percentiles_usec_fcall" => {
                    w.p50 = field("p50");
                    w.p99 = field("p99");
                }
                _ => {}
            }
        }
        Ok(w)
    }

    /// Ends `worker`'s in-flight request with a plain HINCRBY on the routing
    /// view (docs/state.md), so that the window's FCALLs are the route calls
    /// alone. The proxy uses the `inflight` script for this.
    async fn release(&mut self, worker: &str) -> Result<()> {
        let base = format!("rb:{{{MODEL}}}");
        let idx: String = redis::cmd("HGET")
            .arg(format!("{base}:ids"))
            .arg(worker)
            .query_async(&mut self.conn)
            .await?;
        let _: i64 = redis::cmd("HINCRBY")
            .arg(format!("{base}:view"))
            .arg(format!("{idx}:{ROUTER}"))
            .arg(-1)
            .query_async(&mut self.conn)
            .await?;
        Ok(())
    }
}

/// One row: prompts prepared first, then their route calls back to back in
/// one statistics window (each request released before the next, as if it
/// had completed), then the tail claims the proxy would make off the
/// critical path.
async fn row(
    store: &StateStore,
    stats: &mut Stats,
    prepared: &[Prepared],
) -> Result<(Vec<Duration>, Window)> {
    stats.reset().await?;
    let mut walls = Vec::new();
    let mut tails = Vec::new();
    for p in prepared {
        let r = route(store, p).await?;
        if let Some(w) = &r.worker {
            stats.release(w).await?;
            tails.push((w.clone(), &p.hashes, r.tail_from));
        }
        walls.push(p.tokenize + p.hash + r.wall);
    }
    let window = stats.window().await?;
    for (worker, chain, from) in tails {
        if from < chain.len() {
            store.claim_prefix(MODEL, &worker, chain, from).await?;
        }
    }
    Ok((walls, window))
}

async fn run() -> Result<()> {
    let valkey = fleet::Valkey::start()?;
    let url = valkey.url();
    let mut settings = ConnectionSettings::new(&url);
    settings.hot_timeout = Duration::from_secs(2);
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(3600),
        ..StateTtls::default()
    };
    let store = StateStore::new(settings, "rb", ROUTER, ttls, BatchLimits::default())?;
    store.router_lease(MODEL, Duration::from_secs(3600)).await?;
    for i in 0..8 {
        let hb = WorkerHeartbeat {
            worker_id: format!("w{i}"),
            url: "http://127.0.0.1:9".into(),
            load: None,
        };
        store.heartbeat(MODEL, &hb).await?;
    }
    let mut stats = Stats {
        conn: redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?,
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3");
    let pipeline = ModelPipeline::load(&dir, 16, &HashSeed::Default)?;
    println!(
        "| prompt | prefix | p50 | p99 | p50 tokenize | p50 hash | p50 Valkey call | route server p50 / p99 | server time per request (mean) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    // Lines per prompt size, calibrated with the tokenizer.
    let per_line = pipeline.tokenizer.encode_plain(&text(100, 1), true)?.len() as f64 / 100.0;
    for tokens in [1024usize, 8192, 32768] {
        let lines = (tokens as f64 / per_line) as usize;
        for (warm, on_cpu) in [(false, false), (true, false), (true, true)] {
            let shared = text(lines, if on_cpu { 888_888 } else { 999_999 });
            if warm {
                let p = prepare(&pipeline, &format!("{shared}Warm-up question\n"))?;
                row(&store, &mut stats, &[p]).await?;
                if on_cpu {
                    offload(&store, &p_hashes(&pipeline, &shared)?).await?;
                }
            }
            let mut prepared = Vec::new();
            let runs = if warm { WARM_RUNS } else { RUNS };
            for r in 0..runs {
                let prompt = if warm {
                    format!("{shared}Question {r}?\n")
                } else {
                    text(lines, r * 31 + tokens)
                };
                prepared.push(prepare(&pipeline, &prompt)?);
            }
            let (walls, w) = row(&store, &mut stats, &prepared).await?;
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let p50_of =
                |f: fn(&Prepared) -> Duration| ms(pct(prepared.iter().map(f).collect(), 0.5));
            let calls: Vec<Duration> = walls
                .iter()
                .zip(&prepared)
                .map(|(w, p)| *w - p.tokenize - p.hash)
                .collect();
            println!(
                "| {}k tokens | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.0} / {:.0} µs | {:.0} µs |",
                tokens / 1024,
                match (warm, on_cpu) {
                    (false, _) => "new (cold)",
                    (true, false) => "seen before (warm)",
                    (true, true) => "seen, ¾ on the CPU tier",
                },
                ms(pct(walls.clone(), 0.5)),
                ms(pct(walls, 0.99)),
                p50_of(|p| p.tokenize),
                p50_of(|p| p.hash),
                ms(pct(calls, 0.5)),
                w.p50,
                w.p99,
                w.usec as f64 / runs as f64,
            );
            if w.calls != runs as u64 {
                println!("(row above: {} script calls for {runs} requests)", w.calls);
            }
        }
    }
    println!(
        "\n{RUNS} decisions per cold row, {WARM_RUNS} per warm row; 8 live workers. The CPU rows: the warm prefix's indexed blocks past its first quarter reported on its worker's CPU tier. Prompts are tokenized and hashed first; then their route calls run back to back (each request released before the next), and the tail claims after. Server times: `INFO latencystats` p50/p99 of FCALL and `INFO commandstats` usec per request, over the route calls alone (long chains add a FCALL_RO lookup)."
    );
    Ok(())
}

/// The block hashes of `text`'s whole blocks.
fn p_hashes(pipeline: &ModelPipeline, text: &str) -> Result<Vec<BlockHash>> {
    Ok(prepare(pipeline, text)?.hashes)
}

/// Reports the last three quarters of `prefix`'s indexed blocks on the CPU
/// tier of the worker holding the most of it (the GPU evicted them).
async fn offload(store: &StateStore, prefix: &[BlockHash]) -> Result<()> {
    let probe = store.probe(MODEL, prefix).await?;
    let Some(holder) = probe.workers.iter().max_by_key(|w| w.matched_blocks) else {
        return Ok(());
    };
    let from = prefix.len() / 4;
    let tail: Vec<BlockHash> = protocol::index::indexed_positions(prefix.len())
        .filter(|&i| i >= from)
        .map(|i| prefix[i])
        .collect();
    store
        .stored_on(MODEL, &holder.info.worker_id, &tail, protocol::Tier::Cpu)
        .await?;
    Ok(())
}

fn main() -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(run())
}
