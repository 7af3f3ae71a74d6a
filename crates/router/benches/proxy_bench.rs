//! Proxy overhead: the same client and the same stub worker, called
//! directly and through a router (real routing path: tokenize, hash, the
//! atomic Valkey call, forwarding), interleaved in one run. Then the same
//! small requests and `/health` while four 10.5 MB prompts (about 1.75 M
//! tokens each, over the 1 M default limit) keep the router tokenizing.
//!
//! `cargo bench --bench proxy_bench`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use clap::Parser;
use prefix_router::{ServeArgs, ServeConfig};
use state::{BatchLimits, ConnectionSettings, StateStore, StateTtls, WorkerHeartbeat};

const MODEL: &str = "bench";
const RUNS: usize = 300;
/// A completion streamed as vLLM streams one: two tokens, the second with
/// its `finish_reason` (the router's relay reads it: an answer that ends
/// without one is a broken answer, moved or failed), then `[DONE]`.
const SSE: [&str; 3] = [
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"bench\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"bench\",\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"length\"}]}\n\n",
    "data: [DONE]\n\n",
];

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// A stub worker that answers at once: JSON, or three SSE chunks.
async fn stub(body: Bytes) -> Response {
    let streamed =
        serde_json::from_slice::<serde_json::Value>(&body).is_ok_and(|v| v["stream"] == true);
    if streamed {
        let chunks = SSE
            .iter()
            .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes())));
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(futures_util::stream::iter(chunks)))
            .unwrap_or_default();
    }
    Response::new(Body::from("{\"choices\":[{\"text\":\"ok\"}]}"))
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

async fn run() -> Result<()> {
    let valkey = fleet::Valkey::start()?;
    let stub_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let stub_url = format!("http://{}", stub_listener.local_addr()?);
    tokio::spawn(async move { axum::serve(stub_listener, Router::new().fallback(stub)).await });
    let store = StateStore::new(
        ConnectionSettings::new(&valkey.url()),
        "pr",
        "bench-probe",
        StateTtls {
            worker_lease: Duration::from_secs(3600),
            ..StateTtls::default()
        },
        BatchLimits::default(),
    )?;
    let hb = WorkerHeartbeat {
        worker_id: "stub".into(),
        url: stub_url.clone(),
        load: None,
    };
    store.heartbeat(MODEL, &hb).await?;

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3");
    let router_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let router_url = format!("http://{}", router_listener.local_addr()?);
    let cli = Cli::try_parse_from([
        "serve",
        "--valkey",
        &valkey.url(),
        "--model",
        MODEL,
        "--tokenizer-dir",
        dir.to_str().unwrap_or_default(),
        "--internal-token",
        "bench",
    ])?;
    let cfg = ServeConfig::resolve(cli.serve)?;
    let (_stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(prefix_router::serve_on(
        router_listener,
        cfg,
        stop_rx,
        std::future::pending(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;

    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    // A ~1k-token prompt with a shared prefix, as a warm production request.
    let prefix = "You are a helpful assistant for the router benchmark.\n".repeat(80);
    println!(
        "| request | direct p50 | via router p50 | overhead p50 | direct p99 | via router p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for stream in [false, true] {
        let (mut direct, mut routed) = (Vec::new(), Vec::new());
        for i in 0..RUNS + 20 {
            let body = serde_json::json!({"model": MODEL, "prompt": format!("{prefix}Question {i}?"), "stream": stream});
            for (base, times) in [(&stub_url, &mut direct), (&router_url, &mut routed)] {
                let t = Instant::now();
                let resp = client
                    .post(format!("{base}/v1/completions"))
                    .json(&body)
                    .send()
                    .await?;
                anyhow::ensure!(resp.status().is_success(), "{base}: {}", resp.status());
                let bytes = resp.bytes().await?;
                let elapsed = t.elapsed();
                anyhow::ensure!(!bytes.is_empty(), "empty body");
                if i >= 20 {
                    times.push(elapsed);
                }
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (d50, r50) = (pct(direct.clone(), 0.5), pct(routed.clone(), 0.5));
        println!(
            "| {} | {:.3} ms | {:.3} ms | +{:.3} ms | {:.3} ms | {:.3} ms |",
            if stream {
                "streamed (3 SSE chunks)"
            } else {
                "non-streamed"
            },
            ms(d50),
            ms(r50),
            ms(r50) - ms(d50),
            ms(pct(direct, 0.99)),
            ms(pct(routed, 0.99)),
        );
    }
    println!(
        "\n{RUNS} requests each (after 20 warm-up), direct and routed interleaved; ~1k-token prompt with a seen prefix; one worker."
    );
    under_huge_prompts(&client, &router_url, &prefix).await
}

/// Small requests and `/health` through the router, alone and then while
/// four huge prompts are being tokenized (each refused with a 413 once past
/// the prompt limit, then sent again).
async fn under_huge_prompts(client: &reqwest::Client, router: &str, prefix: &str) -> Result<()> {
    const SMALL: usize = 200;
    let huge = "All work and no play makes Jack a dull boy. ".repeat(10_500_000 / 44);
    let huge_body = serde_json::to_vec(&serde_json::json!({"model": MODEL, "prompt": huge}))?;
    let measure = |label: &'static str| {
        let client = client.clone();
        let router = router.to_owned();
        let prefix = prefix.to_owned();
        async move {
            let (mut small, mut health) = (Vec::new(), Vec::new());
            let started = Instant::now();
            // At least SMALL of each, and for at least 3 s.
            for i in 0.. {
                if i >= SMALL && started.elapsed() > Duration::from_secs(3) {
                    break;
                }
                let body = serde_json::json!({"model": MODEL, "prompt": format!("{prefix}Small {label} {i}?")});
                let t = Instant::now();
                let resp = client
                    .post(format!("{router}/v1/completions"))
                    .json(&body)
                    .send()
                    .await?;
                anyhow::ensure!(resp.status().is_success(), "small: {}", resp.status());
                resp.bytes().await?;
                small.push(t.elapsed());
                let t = Instant::now();
                let resp = client.get(format!("{router}/health")).send().await?;
                anyhow::ensure!(resp.status().is_success(), "health: {}", resp.status());
                resp.bytes().await?;
                health.push(t.elapsed());
            }
            anyhow::Ok((small, health))
        }
    };
    let (quiet_small, quiet_health) = measure("quiet").await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut hogs = Vec::new();
    for _ in 0..4 {
        let (client, url, body, stop) = (
            client.clone(),
            format!("{router}/v1/completions"),
            huge_body.clone(),
            stop.clone(),
        );
        hogs.push(tokio::spawn(async move {
            let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let resp = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                if let Ok(r) = resp {
                    *statuses.entry(r.status().as_u16()).or_default() += 1;
                    let _ = r.bytes().await;
                }
            }
            statuses
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (busy_small, busy_health) = measure("busy").await?;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for h in hogs {
        for (s, n) in h.await? {
            *statuses.entry(s).or_default() += n;
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("\n| while | requests | small completion p50 | p99 | /health p50 | p99 |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (label, small, health) in [
        ("nothing else", quiet_small, quiet_health),
        ("4 huge prompts in flight", busy_small, busy_health),
    ] {
        println!(
            "| {label} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |",
            small.len(),
            ms(pct(small.clone(), 0.5)),
            ms(pct(small, 0.99)),
            ms(pct(health.clone(), 0.5)),
            ms(pct(health, 0.99)),
        );
    }
    println!(
        "\nSmall completions (~1k tokens) and /health, alternated, for at least 3 s and {SMALL} each; huge prompts: {} bytes of text each, answers {statuses:?} (413: refused once past the 1 M-token limit, 503: the large lane's queue was full).",
        huge.len()
    );
    Ok(())
}

fn main() -> Result<()> {
    tokio::runtime::Runtime::new()?.block_on(run())
}
