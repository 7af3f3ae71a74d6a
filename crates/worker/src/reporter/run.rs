//! Wiring one reporter: the engine's KV-event stream into a [`Session`],
//! its blocks and scraped load into a [`Pusher`] to the fleet.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::MetricsClient;
use crate::kv_events::{KvEventSubscriber, KvEventSubscriberConfig, SocketMode};
use crate::push::{
    BlockSource, FleetClient, FleetClientConfig, PushError, Pusher, PusherConfig, PusherHandle,
    WorkerIdentity,
};
use protocol::family::FamilyBlock;
use protocol::hashing::{BlockHasher, HashSeed, LoraKey};
use protocol::vllm_metrics::parse_vllm_load;
use protocol::{EngineIncarnation, WorkerLoad};

use super::engine_blocks::EngineBlocks;
use super::session::{FleetSink, Session};

/// Everything a reporter needs to know.
#[derive(Debug, Clone)]
pub struct ReporterConfig {
    /// The engine's KV-event endpoint (vLLM's `--kv-events-config` endpoint).
    pub kv_events: String,
    /// The engine's replay endpoint, if it has one.
    pub replay: Option<String>,
    /// Topic filter ("" = every topic).
    pub topic: String,
    /// The engine's HTTP base URL, whose `/metrics` gives its load.
    pub engine_url: Option<String>,
    /// How often the engine's load is scraped.
    pub scrape_interval: Duration,
    /// The fleet's internal API (a router, or a balancer in front of them).
    pub fleet_url: String,
    /// The fleet's internal token.
    pub token: Option<String>,
    /// Worker id, model and the URL routers send requests to.
    pub identity: WorkerIdentity,
    /// Tokens per block (the engine's and the fleet's).
    pub block_size: usize,
    /// Prefix family depth (`protocol::family`).
    pub family_blocks: usize,
    /// The engine's `PYTHONHASHSEED`, if set.
    pub hash_seed: HashSeed,
    /// LoRA adapters' paths by name.
    pub loras: HashMap<String, LoraKey>,
    /// Most engine blocks kept (bounded memory).
    pub max_blocks: usize,
    /// Where to serve `/metrics`, if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// How often changes are flushed to the fleet.
    pub flush_interval: Duration,
    /// How often a full sync is sent.
    pub sync_interval: Duration,
    /// On shutdown, how long the worker drains before it deregisters
    /// ([`super::drain`]); zero: it deregisters at once.
    pub drain_deadline: Duration,
}

/// Why a reporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReporterError {
    /// Bad block size.
    #[error("invalid block size: {0}")]
    BlockSize(#[from] protocol::hashing::InvalidBlockSize),
    /// The fleet client could not be built.
    #[error("fleet client: {0}")]
    Push(#[from] PushError),
    /// The metrics listener could not be bound.
    #[error("metrics listener: {0}")]
    Listen(#[from] std::io::Error),
    /// The metrics client could not be built.
    #[error("engine metrics client: {0}")]
    Scrape(#[from] crate::ScrapeError),
}

/// What the pusher reads: the engine's blocks and its last scraped load.
struct EngineSource {
    blocks: Arc<Mutex<EngineBlocks>>,
    load: Arc<Mutex<Option<WorkerLoad>>>,
}

impl BlockSource for EngineSource {
    fn snapshot(&self) -> Vec<FamilyBlock> {
        self.blocks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .snapshot()
    }

    fn load(&self) -> Option<WorkerLoad> {
        *self
            .load
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl FleetSink for PusherHandle {
    fn stored(&self, hashes: &[FamilyBlock]) {
        PusherHandle::stored(self, hashes);
    }

    fn evicted(&self, hashes: &[FamilyBlock]) {
        PusherHandle::evicted(self, hashes);
    }

    fn resync(&self) {
        self.request_resync();
    }
}

/// Runs a reporter until `shutdown` resolves, then drains the worker (up
/// to its drain deadline) and deregisters it.
///
/// `metrics` renders the process's metrics recorder, served on
/// `cfg.metrics_listen` when that is set.
pub async fn run(
    cfg: ReporterConfig,
    metrics: Option<PrometheusHandle>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ReporterError> {
    let hasher = BlockHasher::new(cfg.block_size, &cfg.hash_seed)?;
    // The counters alert rules take a rate of exist from the first scrape.
    for name in [
        "prefix_router_reporter_resyncs_total",
        "prefix_router_reporter_engine_restarts_total",
        "prefix_router_reporter_scrape_failures_total",
        "prefix_router_reporter_unmappable_total",
    ] {
        metrics::counter!(name).absolute(0);
    }
    metrics::counter!("prefix_router_push_dropped_hashes_total", "reason" => "overflow")
        .absolute(0);
    // `GET /drain` beside `/metrics` (a preStop hook): drains the worker,
    // answered once it is drained.
    let (drain_tx, mut drain_rx) = tokio::sync::mpsc::channel(8);
    let exporter = match cfg.metrics_listen {
        Some(addr) => Some(serve_metrics(
            tokio::net::TcpListener::bind(addr).await?,
            metrics,
            drain_tx,
        )),
        None => None,
    };
    let blocks = Arc::new(Mutex::new(
        EngineBlocks::new(hasher, cfg.loras.clone(), cfg.max_blocks)
            .with_family_blocks(cfg.family_blocks),
    ));
    let load = Arc::new(Mutex::new(None));
    let source = Arc::new(EngineSource {
        blocks: blocks.clone(),
        load: load.clone(),
    });
    let client = FleetClient::new(FleetClientConfig::new(&cfg.fleet_url, cfg.token.clone()))?;
    let mut push_cfg = PusherConfig::new(cfg.identity.clone());
    push_cfg.flush_interval = cfg.flush_interval;
    push_cfg.sync_interval = cfg.sync_interval;
    push_cfg.family_blocks = Some(cfg.family_blocks);
    let pusher = Pusher::start(client, push_cfg, source);

    // The engine binds or connects by vLLM's rule; the reporter does the
    // opposite, connecting to a wildcard bind on the same host.
    let mode = SocketMode::vllm_pub_mode(&cfg.kv_events).opposite();
    let endpoint = match mode {
        SocketMode::Connect => cfg.kv_events.replace("://*:", "://127.0.0.1:"),
        SocketMode::Bind => cfg.kv_events.clone(),
    };
    let mut sub_cfg = KvEventSubscriberConfig::new(endpoint);
    sub_cfg.mode = mode;
    sub_cfg.topic = cfg.topic.clone();
    sub_cfg.replay_endpoint = cfg
        .replay
        .as_ref()
        .map(|r| r.replace("://*:", "://127.0.0.1:"));
    tokio::pin!(shutdown);
    // A sidecar may start before its engine: keep trying to subscribe.
    let mut sub = loop {
        tokio::select! {
            () = &mut shutdown => {
                let _ = pusher.shutdown(false).await;
                return Ok(());
            }
            started = KvEventSubscriber::start(sub_cfg.clone()) => match started {
                Ok(sub) => break sub,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot subscribe to the engine's KV events yet; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
        }
    };
    tracing::info!(endpoint = %cfg.kv_events, replay = ?cfg.replay, worker = %cfg.identity.worker_id,
        fleet = %cfg.fleet_url, "reporter subscribed to the engine's KV events");

    let restarted = Arc::new(tokio::sync::Notify::new());
    let scraper = match &cfg.engine_url {
        Some(url) => Some(tokio::spawn(scrape_loop(
            MetricsClient::new(Duration::from_millis(500), 4 << 20)?,
            url.clone(),
            cfg.identity.model.clone(),
            cfg.scrape_interval,
            load.clone(),
            restarted.clone(),
        ))),
        None => None,
    };

    let mut session = Session::new(blocks, pusher.handle());
    session.resync(&sub).await;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(reply) = drain_rx.recv() => {
                super::drain::drain(&pusher, &load, cfg.drain_deadline, scraper.is_some()).await;
                let _ = reply.send(());
            }
            // A restarted engine is cold, and says so by no event until
            // its first request: its metrics tell at once.
            () = restarted.notified() => {
                tracing::warn!("the engine restarted (its /metrics say so); resynchronising");
                metrics::counter!("prefix_router_reporter_engine_restarts_total").increment(1);
                session.resync(&sub).await;
            }
            received = sub.recv() => match received {
                Ok(r) => session.on_batch(&sub, r.seq, &r.batch).await,
                // A lost batch shows up as a gap at the next one.
                Err(e) if e.is_recoverable() => tracing::debug!(error = %e, "KV-event receive"),
                Err(e) => {
                    tracing::error!(error = %e, "KV-event subscription failed");
                    break;
                }
            },
        }
    }
    super::drain::drain(&pusher, &load, cfg.drain_deadline, scraper.is_some()).await;
    for task in [scraper, exporter].into_iter().flatten() {
        task.abort();
    }
    tracing::info!(stats = ?session.stats(), "reporter stopping; deregistering the worker");
    if let Err(e) = pusher.shutdown(true).await {
        tracing::warn!(error = %e, "deregistering on shutdown failed");
    }
    Ok(())
}

/// Keeps `load` at the engine's last scraped gauges (`None` once stale),
/// and notifies `restarted` when a scrape comes from a new engine process
/// ([`EngineIncarnation`]).
async fn scrape_loop(
    client: MetricsClient,
    url: String,
    model: String,
    every: Duration,
    load: Arc<Mutex<Option<WorkerLoad>>>,
    restarted: Arc<tokio::sync::Notify>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<EngineIncarnation> = None;
    loop {
        tick.tick().await;
        let scraped = match client.fetch(&url).await {
            Ok(text) => {
                let now = EngineIncarnation::parse(&text);
                if last.is_some_and(|then| now.restarted_since(&then)) {
                    restarted.notify_one();
                }
                last = Some(now);
                parse_vllm_load(&text, Some(&model)).or_else(|| parse_vllm_load(&text, None))
            }
            Err(e) => {
                metrics::counter!("prefix_router_reporter_scrape_failures_total").increment(1);
                tracing::debug!(error = %e, %url, "engine metrics scrape failed");
                None
            }
        };
        *load
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = scraped;
    }
}

/// Serves the process's metrics.
fn serve_metrics(
    listener: tokio::net::TcpListener,
    handle: Option<PrometheusHandle>,
    drains: tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut app = axum::Router::new().route(
            "/drain",
            axum::routing::get(move || super::drain::on_request(drains.clone())),
        );
        match handle {
            Some(handle) => {
                app = app.route(
                    "/metrics",
                    axum::routing::get(move || {
                        let handle = handle.clone();
                        async move { handle.render() }
                    }),
                );
            }
            None => tracing::warn!("metrics recorder unavailable"),
        }
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "metrics listener stopped");
        }
    })
}
