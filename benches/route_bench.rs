//! The routing decision's cost: tokenize + hash + the atomic Valkey call,
//! for 1k, 8k and 32k-token prompts, cold (a prefix never seen) and warm
//! (a seen prefix, new question), plus Valkey server time per routed request.
//!
//! `cargo bench --bench route_bench`

#[path = "state_bench/server.rs"]
mod server;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use prefix_router::hashing::HashSeed;
use prefix_router::proxy::ModelPipeline;
use prefix_router::routing::CacheAwareConfig;
use prefix_router::state::{
    BatchLimits, ConnectionSettings, ROUTE_HEAD, ScriptName, ScriptSet, StateStore, StateTtls,
    WorkerHeartbeat,
};

const MODEL: &str = "bench";
const RUNS: usize = 41;

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

/// Wall time of one decision and of its phases.
#[derive(Clone, Copy)]
struct Timing {
    total: Duration,
    tokenize: Duration,
    hash: Duration,
}

/// One routing decision as the proxy makes it.
async fn decide(store: &StateStore, pipeline: &ModelPipeline, prompt: &str) -> Result<Timing> {
    let t = Instant::now();
    let ids = pipeline.tokenizer.encode(prompt, true)?;
    let tokenize = t.elapsed();
    let hashes = pipeline.block_hashes(&ids, None, None);
    let hash = t.elapsed() - tokenize;
    let head = hashes.len().min(ROUTE_HEAD);
    let hints: Vec<(String, usize)> = if hashes.len() > ROUTE_HEAD {
        let full = store.lookup(MODEL, &hashes).await?;
        full.workers
            .iter()
            .filter(|w| w.matched_blocks > head)
            .map(|w| (w.info.worker_id.clone(), w.matched_blocks - head))
            .collect()
    } else {
        Vec::new()
    };
    let params = CacheAwareConfig {
        epsilon: 1000.0,
        ..CacheAwareConfig::default()
    }
    .route_params(ids.len() as u64, 16, 1);
    let o = store.route(MODEL, &hashes[..head], &params, &hints).await?;
    let total = t.elapsed();
    // What the proxy does off the critical path: the tail claim; the
    // request's end releases the in-flight count.
    if let Some(i) = o.chosen {
        let worker = o.lookup.workers[i].info.worker_id.clone();
        let tail = &hashes[o.covered.min(hashes.len())..];
        if !tail.is_empty() {
            store.claim(MODEL, &worker, tail).await?;
        }
        store.add_in_flight(MODEL, &worker, -1).await?;
    }
    Ok(Timing {
        total,
        tokenize,
        hash,
    })
}

/// Per-call server time from the slow log (threshold 0 logs every call):
/// the route script's calls, and every EVALSHA of the row.
struct ServerTimes {
    route_usec: Vec<u64>,
    all_usec: u64,
}

async fn slowlog_reset(url: &str) -> Result<()> {
    let mut c = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    for (k, v) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "200000"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut c)
            .await?;
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut c)
        .await?;
    Ok(())
}

async fn slowlog_times(url: &str, route_sha: &str) -> Result<ServerTimes> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut c = redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(&mut c)
        .await?;
    let mut out = ServerTimes {
        route_usec: Vec::new(),
        all_usec: 0,
    };
    for e in entries {
        let redis::Value::Array(fields) = e else {
            continue;
        };
        let (Some(redis::Value::Int(usec)), Some(redis::Value::Array(args))) =
            (fields.get(2), fields.get(3))
        else {
            continue;
        };
        let arg = |i: usize| match args.get(i) {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_lowercase(),
            _ => String::new(),
        };
        if !arg(0).starts_with("evalsha") {
            continue;
        }
        out.all_usec += *usec as u64;
        if arg(1) == route_sha {
            out.route_usec.push(*usec as u64);
        }
    }
    Ok(out)
}

async fn run() -> Result<()> {
    let valkey = server::ValkeyGuard::start()?;
    let url = valkey.url();
    let mut settings = ConnectionSettings::new(&url);
    settings.hot_timeout = Duration::from_secs(2);
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(3600),
        ..StateTtls::default()
    };
    let store = StateStore::new(settings, "rb", "bench-router", ttls, BatchLimits::default())?;
    store.router_lease(MODEL, Duration::from_secs(3600)).await?;
    for i in 0..8 {
        let hb = WorkerHeartbeat {
            worker_id: format!("w{i}"),
            url: "http://127.0.0.1:9".into(),
            load: None,
        };
        store.heartbeat(MODEL, &hb).await?;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tokenizers/qwen3");
    let pipeline = ModelPipeline::load(&dir, 16, &HashSeed::Default)?;
    let route_sha = redis::Script::new(ScriptSet::new().source(ScriptName::Route))
        .get_hash()
        .to_owned();
    println!(
        "| prompt | prefix | p50 | p99 | p50 tokenize | p50 hash | p50 Valkey call | route.lua server p50 | server time per request |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    // Lines per prompt size, calibrated with the tokenizer.
    let per_line = pipeline.tokenizer.encode_plain(&text(100, 1), true)?.len() as f64 / 100.0;
    for tokens in [1024usize, 8192, 32768] {
        let lines = (tokens as f64 / per_line) as usize;
        for warm in [false, true] {
            let shared = text(lines, 999_999);
            if warm {
                decide(&store, &pipeline, &format!("{shared}Warm-up question\n")).await?;
            }
            slowlog_reset(&url).await?;
            let mut times = Vec::new();
            for r in 0..RUNS {
                let prompt = if warm {
                    format!("{shared}Question {r}?\n")
                } else {
                    text(lines, r * 31 + tokens)
                };
                times.push(decide(&store, &pipeline, &prompt).await?);
            }
            let server = slowlog_times(&url, &route_sha).await?;
            let mut route_usec = server.route_usec.clone();
            route_usec.sort_unstable();
            let route_p50 = route_usec.get(route_usec.len() / 2).copied().unwrap_or(0);
            let per_request = server.all_usec as f64 / RUNS as f64;
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let of = |f: fn(&Timing) -> Duration| times.iter().map(f).collect::<Vec<_>>();
            println!(
                "| {}k tokens | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {route_p50} µs | {per_request:.0} µs |",
                tokens / 1024,
                if warm {
                    "seen before (warm)"
                } else {
                    "new (cold)"
                },
                ms(pct(of(|t| t.total), 0.5)),
                ms(pct(of(|t| t.total), 0.99)),
                ms(pct(of(|t| t.tokenize), 0.5)),
                ms(pct(of(|t| t.hash), 0.5)),
                ms(pct(of(|t| t.total - t.tokenize - t.hash), 0.5)),
            );
        }
    }
    println!(
        "\n{RUNS} decisions per row; 8 live workers. Server times from SLOWLOG with a 0 µs threshold: the route script's median, and every EVALSHA of the row (route, tail claims, in-flight release, lookups for chains over {ROUTE_HEAD} blocks) per request."
    );
    Ok(())
}

fn main() -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(run())
}
