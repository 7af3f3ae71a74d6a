//! `sim-worker`: a simulated vLLM replica without a GPU, for tests and load
//! tests of the fleet. See `docs/sim-worker.md`.
//!
//! Prints `listening on http://ADDR` (and the KV-event endpoints, when
//! publishing) on stdout once it serves, so a harness can start it on port 0.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use metrics_exporter_prometheus::PrometheusBuilder;
use protocol::{WorkerRole, parse_duration, parse_duration_or_zero};
use sim_worker::server::{
    FaultSettings, KvEventsSettings, LmcacheSettings, PushSettings, SimConfig, SimServer,
};
use sim_worker::{EngineConfig, KvTransferModel, PrefillSharing, Tiers, TimeModel};
use tracing_subscriber::EnvFilter;
use worker::kv_events::SocketMode;

/// A simulated vLLM replica: vLLM's OpenAI API and metrics over a modelled
/// prefix cache, scheduler and clock, reporting its cache to a prefix-router
/// fleet.
#[derive(Parser, Debug)]
#[command(name = "sim-worker", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on (0 picks a free one; the bound address is printed).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The worker's id in the fleet [default: sim-<pid>].
    #[arg(long)]
    worker_id: Option<String>,
    /// The served model name (must match the router's `--model`).
    #[arg(long, default_value = "qwen3")]
    model: String,
    /// Directory of the model's tokenizer.json and tokenizer_config.json.
    #[arg(long, default_value = "../shared/tokenizers/qwen3")]
    tokenizer_dir: PathBuf,
    /// Tokens per KV block (vLLM's --block-size).
    #[arg(long, default_value_t = 16)]
    block_size: usize,
    /// Prefix family depth in blocks; must equal the routers'
    /// `--family-blocks` when they shard the model.
    #[arg(long, default_value_t = protocol::family::DEFAULT_FAMILY_BLOCKS)]
    family_blocks: usize,
    /// vLLM's PYTHONHASHSEED, if the engines set it (seeds block hashes).
    #[arg(long, env = "PYTHONHASHSEED")]
    hash_seed: Option<String>,
    /// KV blocks in the pool (vLLM's num_gpu_blocks).
    #[arg(long, default_value_t = 8192)]
    num_blocks: usize,
    /// Most requests running at once (vLLM's --max-num-seqs).
    #[arg(long, default_value_t = 256)]
    max_num_seqs: usize,
    /// How running requests' prefills share the engine: `serial` (one
    /// after another in admission order, each at the full rate: one GPU's
    /// compute, as vLLM's chunked prefill shares it) or `parallel`
    /// (independent, as if each had a GPU of its own; no queueing).
    #[arg(long, default_value = "serial", value_parser = parse_prefill)]
    prefill: PrefillSharing,
    /// Role in a prefill/decode-disaggregated fleet: `prefill` answers
    /// `do_remote_decode` requests with the handoff's `kv_transfer_params`,
    /// `decode` pulls the KV of `do_remote_prefill` requests, `both` (the
    /// default) ignores them. Registered in the heartbeat.
    #[arg(long, default_value = "both")]
    role: WorkerRole,
    /// Blocks of the CPU offload tier: blocks the GPU pool evicts move
    /// there and are loaded back instead of recomputed (0: no tier).
    #[arg(long, default_value_t = 0)]
    cpu_blocks: usize,
    /// KV-cache bytes of one token (all layers, keys and values); sizes
    /// transfers [default: Qwen3-8B in bf16].
    #[arg(long, default_value_t = KvTransferModel::default().kv_bytes_per_token)]
    kv_bytes_per_token: u64,
    /// Bandwidth of a decode worker's pull from a prefill worker, in Gbit/s.
    #[arg(long, default_value_t = KvTransferModel::default().remote_gbps)]
    transfer_gbps: f64,
    /// Bandwidth of a load from the CPU tier, in Gbit/s.
    #[arg(long, default_value_t = KvTransferModel::default().cpu_gbps)]
    cpu_transfer_gbps: f64,
    /// Prefill cost per uncached prompt token, in microseconds.
    #[arg(long, default_value_t = 100.0)]
    prefill_us_per_token: f64,
    /// Prefill cost per cached prompt token, in microseconds.
    #[arg(long, default_value_t = 2.0)]
    prefill_us_per_cached_token: f64,
    /// Fixed cost per request, in milliseconds.
    #[arg(long, default_value_t = 5.0)]
    request_overhead_ms: f64,
    /// Cost per output token after the first, in milliseconds.
    #[arg(long, default_value_t = 20.0)]
    decode_ms_per_token: f64,
    /// Multiplies every simulated duration (0.1 = ten times faster).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Output tokens when a request gives no max_tokens.
    #[arg(long, default_value_t = 16)]
    default_max_tokens: usize,
    /// The text the answers' tokens are drawn from (tokenized at start;
    /// each output token is a function of the prompt and the tokens
    /// before it, as greedy decoding gives).
    #[arg(long, default_value = sim_worker::server::DEFAULT_VOCABULARY)]
    vocabulary: String,
    /// Break every answer after some output tokens: `cut:N` (the
    /// connection is cut), `error:N` (an error event ends the stream) or
    /// `crash:N` (the process exits); also set live by `POST /sim/faults`.
    #[arg(long)]
    stream_fault: Option<sim_worker::server::StreamFault>,
    /// Report the cache to this fleet URL (any router, or a balancer).
    #[arg(long)]
    fleet_url: Option<String>,
    /// The fleet's internal bearer token.
    #[arg(long, env = "PREFIX_ROUTER_INTERNAL_TOKEN", hide_env_values = true)]
    internal_token: Option<String>,
    /// URL routers reach this worker at [default: http://<bound address>].
    #[arg(long)]
    advertise_url: Option<String>,
    /// Period of stored/evicted reports.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    flush_interval: Duration,
    /// Period of full snapshots.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    sync_interval: Duration,
    /// Period of heartbeats.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    heartbeat_interval: Duration,
    /// Publish vLLM KV events on this ZeroMQ endpoint (e.g. tcp://127.0.0.1:5557).
    #[arg(long)]
    kv_events_endpoint: Option<String>,
    /// Connect the KV-event PUB socket instead of binding it.
    #[arg(long)]
    kv_events_connect: bool,
    /// Serve KV-event replays on this ZeroMQ endpoint.
    #[arg(long, requires = "kv_events_endpoint")]
    kv_events_replay_endpoint: Option<String>,
    /// Topic of the KV-event messages.
    #[arg(long, default_value = "")]
    kv_events_topic: String,
    /// Fault: probability (0..=1) that an evicted block goes unreported.
    #[arg(long, default_value_t = 0.0)]
    drop_evictions: f64,
    /// Fault: send no reports (heartbeats, pushes, KV events) from the start.
    #[arg(long)]
    stop_reporting: bool,
    /// Fault: start paused (requests hang until POST /sim/faults unpauses).
    #[arg(long)]
    paused: bool,
    /// Fault: exit abruptly (status 137) this long after start.
    #[arg(long, value_parser = parse_duration)]
    crash_after: Option<Duration>,
    /// On SIGTERM, the worker drains this long before it stops: it is
    /// marked draining in the fleet (no router sends it anything new), its
    /// answers finish, and at the deadline the routers move what still
    /// runs; 0s: it stops at once (open answers get 5 s).
    #[arg(long, default_value = "30s", value_parser = parse_duration_or_zero)]
    drain_deadline: Duration,
    /// Play an engine with LMCache beside it, reporting to this LMCache
    /// controller (`HOST:PULL:REPLY:HEARTBEAT`, its `--monitor-ports`):
    /// the chunks the GPU pool and CPU tier hold whole, in LMCache's keys;
    /// the CPU tier is then not reported to the fleet (as vLLM's KV events
    /// do not show LMCache's).
    #[arg(long)]
    lmcache_controller: Option<String>,
    /// The LMCache `instance_id` reported [default: the worker id].
    #[arg(long, requires = "lmcache_controller")]
    lmcache_instance_id: Option<String>,
    /// Seed of the fault injection's random numbers.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn micros(what: &str, us: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(us / 1e6)
        .map_err(|e| anyhow::anyhow!("--{what} must be a non-negative number: {e}"))
}

fn config(args: Args) -> anyhow::Result<SimConfig> {
    if !(0.0..=1.0).contains(&args.drop_evictions) {
        bail!("--drop-evictions must be within 0..=1");
    }
    let time = TimeModel {
        prefill_per_token: micros("prefill-us-per-token", args.prefill_us_per_token)?,
        prefill_per_cached_token: micros(
            "prefill-us-per-cached-token",
            args.prefill_us_per_cached_token,
        )?,
        request_overhead: micros("request-overhead-ms", args.request_overhead_ms * 1e3)?,
        decode_per_token: micros("decode-ms-per-token", args.decode_ms_per_token * 1e3)?,
        time_scale: args.time_scale,
    };
    time.validate().context("--time-scale")?;
    let transfer = KvTransferModel {
        kv_bytes_per_token: args.kv_bytes_per_token,
        remote_gbps: args.transfer_gbps,
        cpu_gbps: args.cpu_transfer_gbps,
    };
    transfer
        .validate()
        .context("--transfer-gbps and --cpu-transfer-gbps")?;
    let push = args.fleet_url.map(|url| PushSettings {
        advertise_url: args.advertise_url,
        flush_interval: args.flush_interval,
        sync_interval: args.sync_interval,
        heartbeat_interval: args.heartbeat_interval,
        seed: args.seed,
        ..PushSettings::new(url, args.internal_token)
    });
    let kv_events = args.kv_events_endpoint.map(|endpoint| KvEventsSettings {
        mode: if args.kv_events_connect {
            SocketMode::Connect
        } else {
            SocketMode::Bind
        },
        replay_endpoint: args.kv_events_replay_endpoint,
        topic: args.kv_events_topic,
        ..KvEventsSettings::new(endpoint)
    });
    let worker_id = args
        .worker_id
        .unwrap_or_else(|| format!("sim-{}", std::process::id()));
    let lmcache = match &args.lmcache_controller {
        Some(spec) => {
            let instance = args.lmcache_instance_id.as_deref().unwrap_or(&worker_id);
            Some(
                LmcacheSettings::parse(spec, instance)
                    .map_err(|e| anyhow::anyhow!("--lmcache-controller {e}"))?,
            )
        }
        None => None,
    };
    Ok(SimConfig {
        listen: SocketAddr::new(args.host, args.port),
        worker_id,
        lmcache,
        model: args.model,
        tokenizer_dir: args.tokenizer_dir,
        hash_seed: args.hash_seed,
        engine: EngineConfig {
            time,
            max_num_seqs: args.max_num_seqs,
            num_blocks: args.num_blocks,
            block_size: args.block_size,
            family_blocks: args.family_blocks.max(1),
            prefill: args.prefill,
        },
        role: args.role,
        tiers: Tiers {
            cpu_blocks: args.cpu_blocks,
            transfer,
        },
        default_max_tokens: args.default_max_tokens,
        vocabulary: args.vocabulary,
        push,
        kv_events,
        faults: FaultSettings {
            drop_evictions: args.drop_evictions,
            stop_reporting: args.stop_reporting,
            paused: args.paused,
            crash_after: args.crash_after,
            stream_fault: args.stream_fault,
        },
    })
}

/// Resolves on Ctrl-C or SIGTERM.
async fn terminated() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// Graceful drain: marks the worker draining in the fleet, then serves
/// until the engine runs nothing or `deadline` (when the routers move what
/// still runs). Requests routed just before the mark still arrive: the
/// first look waits a little.
async fn drain(server: &SimServer, deadline: Duration) {
    if deadline.is_zero() {
        return;
    }
    let until = tokio::time::Instant::now() + deadline;
    match server.drain(deadline).await {
        Ok(true) => tracing::info!(
            ?deadline,
            "draining: no new requests; finishing the open ones"
        ),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "not marked draining in the fleet"),
    }
    let poll = Duration::from_millis(50);
    tokio::time::sleep(poll * 4).await;
    while tokio::time::Instant::now() < until && !server.idle() {
        tokio::time::sleep(poll).await;
    }
}

async fn run(config: SimConfig, drain_deadline: Duration) -> anyhow::Result<()> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    metrics::set_global_recorder(recorder).context("installing the metrics recorder")?;
    let mut server = SimServer::start(config, Some(metrics))
        .await
        .context("starting sim-worker")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{}", server.addr())?;
        if let Some(e) = server.kv_endpoint() {
            writeln!(out, "kv-events on {e}")?;
        }
        if let Some(e) = server.kv_replay_endpoint() {
            writeln!(out, "kv-events replay on {e}")?;
        }
        out.flush()?;
    }
    tokio::select! {
        _ = terminated() => tracing::info!("shutting down"),
        _ = server.wait() => bail!("the HTTP server stopped"),
    }
    drain(&server, drain_deadline).await;
    if let Err(e) = server.shutdown(Duration::from_secs(5), true).await {
        tracing::warn!(error = %e, "not deregistered from the fleet; its lease will run out");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_env("SIM_WORKER_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let drain_deadline = args.drain_deadline;
    let config = config(args)?;
    tokio::runtime::Runtime::new()
        .context("starting the Tokio runtime")?
        .block_on(run(config, drain_deadline))
}

fn parse_prefill(s: &str) -> Result<PrefillSharing, String> {
    match s {
        "serial" => Ok(PrefillSharing::Serial),
        "parallel" => Ok(PrefillSharing::Parallel),
        other => Err(format!("{other:?}: expected serial or parallel")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefill_of(flags: &[&str]) -> Result<PrefillSharing, String> {
        let args = Args::try_parse_from(std::iter::once("sim-worker").chain(flags.iter().copied()))
            .map_err(|e| e.to_string())?;
        Ok(config(args).map_err(|e| e.to_string())?.engine.prefill)
    }

    #[test]
    fn prefills_are_serial_unless_asked_parallel() {
        assert_eq!(prefill_of(&[]), Ok(PrefillSharing::Serial));
        assert_eq!(
            prefill_of(&["--prefill", "parallel"]),
            Ok(PrefillSharing::Parallel)
        );
        assert_eq!(
            prefill_of(&["--prefill=serial"]),
            Ok(PrefillSharing::Serial)
        );
        assert!(prefill_of(&["--prefill", "batched"]).is_err());
    }
}
