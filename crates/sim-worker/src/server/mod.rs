//! `sim-worker`'s server: a vLLM replica without a GPU, over HTTP.
//!
//! It answers vLLM's OpenAI API from the simulated [`Engine`]:
//! prompts are tokenized and hashed exactly as the router does
//! ([`ModelPipeline`]), requests wait, prefill and decode on the engine's
//! schedule (streamed tokens arrive at their simulated times), and the
//! prefix cache the engine models is reported to the fleet through the push
//! protocol ([`Pusher`]) and/or as vLLM KV events ([`KvEventPublisher`]).
//! Fault switches (lost evictions, silent reporter, hung server, crash)
//! can be set at start and flipped live through `POST /sim/faults`.
//!
//! Files, one concept each: [`config`] (settings), `core` (engine, clock,
//! event fan-out), `driver` (the clock task), `book` (block tokens for KV
//! events), `reporting` (push and KV-event reporters), `prompt` (request →
//! tokens → hashes), `request` (admission, abort on disconnect), `stream`
//! (SSE timing, stream faults), `responses` (JSON shapes), `handlers` (OpenAI routes),
//! `render` (vLLM's render routes and `/tokenize`: the ids it would cache),
//! `disagg` (a prefill or decode worker's half of a disaggregated request),
//! `lmcache_view` and `lmcache_link` (an LMCache beside the engine: its
//! chunks, reported to a real controller), `metrics` (Prometheus text, ORCA header), `admin` (`/sim/*`), `app`
//! (routes), `start_error` (why a worker could not start). See
//! `docs/sim-worker.md`.

mod admin;
mod app;
mod book;
pub mod config;
mod core;
mod disagg;
mod driver;
mod error;
mod handlers;
mod lmcache_link;
mod lmcache_view;
mod metrics;
mod prompt;
mod render;
mod reporting;
mod request;
mod responses;
mod start_error;
mod stream;

pub use admin::CRASH_EXIT_CODE;
pub use config::{
    DEFAULT_VOCABULARY, FaultSettings, KvEventsSettings, LmcacheSettings, PushSettings, SimConfig,
    StreamFault, StreamFaultKind,
};
pub use metrics::{orca_header, py_float};
pub use start_error::SimServerError;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::app::App;
use self::book::TokenBook;
use self::core::{EngineState, ServeStats, SimCore};
use self::lmcache_link::LmcacheLink;
use self::lmcache_view::ChunkView;
use self::reporting::Reporters;
use crate::Engine;
use protocol::WorkerRole;
use protocol::hashing::HashSeed;
use tokenize::ModelPipeline;
use worker::kv_events::{KvEventPublisher, KvEventPublisherConfig};
use worker::push::{
    FleetClient, FleetClientConfig, PushError, Pusher, PusherConfig, PusherHandle, WorkerIdentity,
};

/// A running simulated worker. Dropping it stops serving at once;
/// [`SimServer::shutdown`] stops gracefully.
pub struct SimServer {
    addr: SocketAddr,
    app: Arc<App>,
    pusher: Option<Pusher>,
    stop: watch::Sender<bool>,
    http: Option<JoinHandle<()>>,
    driver: Option<JoinHandle<()>>,
}

impl SimServer {
    /// Loads the tokenizer, binds `config.listen`, starts the reporters,
    /// the engine's driver and the HTTP server. `metrics` (the process's
    /// Prometheus recorder, if installed) is appended to `/metrics`.
    pub async fn start(
        config: SimConfig,
        metrics: Option<PrometheusHandle>,
    ) -> Result<SimServer, SimServerError> {
        let pipeline = load_pipeline(&config).await?;
        let vocabulary = vocabulary(&pipeline, &config.vocabulary)?;
        let mut engine = Engine::new(config.engine)?;
        engine.set_tiers(config.tiers)?;
        engine.set_record_events(
            config.push.is_some() || config.kv_events.is_some() || config.lmcache.is_some(),
        );
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| SimServerError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SimServerError::Bind {
                addr: config.listen,
                source,
            })?;
        let seed = config.push.as_ref().map_or(0, |p| p.seed);
        let state = Arc::new(Mutex::new(EngineState {
            engine,
            waiters: HashMap::new(),
            book: TokenBook::new(config.engine.block_size),
            reporters: Reporters::new(seed),
            lmcache: None,
            stats: ServeStats::default(),
        }));
        if let Some(lm) = &config.lmcache {
            let capacity = config.engine.num_blocks + config.tiers.cpu_blocks;
            let view = ChunkView::new(config.engine.block_size, capacity).ok_or_else(|| {
                SimServerError::Lmcache(format!(
                    "--block-size {} does not divide LMCache's {}-token chunks",
                    config.engine.block_size,
                    crate::lmcache::CHUNK_TOKENS
                ))
            })?;
            let mut st = lock(&state);
            st.reporters.hide_cpu_tier = true;
            st.lmcache = Some((view, LmcacheLink::start(lm.clone(), addr.port())));
        }
        let mut kv_endpoints = None;
        if let Some(kv) = &config.kv_events {
            let publisher = KvEventPublisher::start(KvEventPublisherConfig {
                endpoint: kv.endpoint.clone(),
                mode: kv.mode,
                replay_endpoint: kv.replay_endpoint.clone(),
                topic: kv.topic.clone(),
                buffer_steps: kv.buffer_steps,
                ..KvEventPublisherConfig::default()
            })
            .await?;
            kv_endpoints = Some((
                publisher.endpoint().to_owned(),
                publisher.replay_endpoint().map(str::to_owned),
            ));
            lock(&state).reporters.kv = Some(publisher);
        }
        let pusher = match &config.push {
            Some(push) => Some(start_pusher(&config, push, addr, &state)?),
            None => None,
        };
        let handle: Option<PusherHandle> = pusher.as_ref().map(Pusher::handle);
        {
            let mut st = lock(&state);
            st.reporters.pusher = handle.clone();
            st.reporters
                .set_drop_evictions(config.faults.drop_evictions);
            st.reporters.set_stopped(config.faults.stop_reporting);
        }
        let core = Arc::new(SimCore::new(
            Instant::now(),
            state,
            config.faults.paused,
            handle,
        ));
        core.set_stream_fault(config.faults.stream_fault);
        let (stop, stop_rx) = watch::channel(false);
        let driver = tokio::spawn(driver::drive(Arc::clone(&core), stop_rx.clone()));
        let app = Arc::new(App {
            core,
            pipeline,
            worker_id: config.worker_id.clone(),
            model: config.model.clone(),
            vocabulary,
            default_max_tokens: config.default_max_tokens,
            metrics,
            kv_endpoints,
            max_model_len: config.engine.num_blocks * config.engine.block_size,
            role: config.role,
            addr,
            block_size: config.engine.block_size,
        });
        let http = tokio::spawn(serve(listener, Arc::clone(&app), stop_rx));
        if let Some(after) = config.faults.crash_after {
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                tracing::warn!(?after, "simulated crash (--crash-after): exiting now");
                std::process::exit(CRASH_EXIT_CODE);
            });
        }
        tracing::info!(%addr, worker_id = %config.worker_id, model = %config.model, "sim-worker serving");
        Ok(SimServer {
            addr,
            app,
            pusher,
            stop,
            http: Some(http),
            driver: Some(driver),
        })
    }

    /// The bound HTTP address (the real port when started on port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound KV-event PUB endpoint, when publishing.
    pub fn kv_endpoint(&self) -> Option<&str> {
        self.app.kv_endpoints.as_ref().map(|(e, _)| e.as_str())
    }

    /// The bound KV-event replay endpoint, when enabled.
    pub fn kv_replay_endpoint(&self) -> Option<&str> {
        self.app
            .kv_endpoints
            .as_ref()
            .and_then(|(_, r)| r.as_deref())
    }

    /// Resolves when the HTTP server stops by itself (it should not).
    pub async fn wait(&mut self) {
        if let Some(http) = self.http.as_mut() {
            let _ = http.await;
            self.http = None;
        }
    }

    /// Marks the worker draining in the fleet it pushes to (graceful drain:
    /// no router sends it anything new, the routers move what still runs
    /// on it at `deadline` from now). False when it pushes to no fleet.
    pub async fn drain(&self, deadline: Duration) -> Result<bool, PushError> {
        match &self.pusher {
            Some(p) => p.drain(deadline).await.map(|()| true),
            None => Ok(false),
        }
    }

    /// True when the engine runs and queues no request.
    pub fn idle(&self) -> bool {
        let g = self.app.core.lock().engine.gauges();
        g.num_requests_running == 0 && g.num_requests_waiting == 0
    }

    /// Stops serving (open connections get up to `grace` to finish), stops
    /// the reporters (draining the worker from the fleet if `deregister`)
    /// and the engine's driver.
    pub async fn shutdown(mut self, grace: Duration, deregister: bool) -> Result<(), PushError> {
        let _ = self.stop.send(true);
        if let Some(mut http) = self.http.take()
            && tokio::time::timeout(grace, &mut http).await.is_err()
        {
            http.abort();
        }
        if let Some(driver) = self.driver.take() {
            let _ = driver.await;
        }
        let kv = self.app.core.lock().reporters.kv.take();
        if let Some(kv) = kv {
            kv.shutdown(grace).await;
        }
        match self.pusher.take() {
            Some(pusher) => pusher.shutdown(deregister).await,
            None => Ok(()),
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        for task in [self.http.take(), self.driver.take()].into_iter().flatten() {
            task.abort();
        }
    }
}

fn lock(state: &Mutex<EngineState>) -> std::sync::MutexGuard<'_, EngineState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The tokens of `text` (no special tokens), each with its own text.
fn vocabulary(pipeline: &ModelPipeline, text: &str) -> Result<crate::Vocabulary, SimServerError> {
    let failed = |reason: String| SimServerError::Vocabulary {
        text: text.to_owned(),
        reason,
    };
    let tok = &pipeline.tokenizer;
    let ids = tok.encode(text, false).map_err(|e| failed(e.to_string()))?;
    let tokens = ids
        .into_iter()
        .map(|id| Ok((id, tok.decode(&[id]).map_err(|e| failed(e.to_string()))?)))
        .collect::<Result<Vec<_>, SimServerError>>()?;
    crate::Vocabulary::new(tokens).map_err(|e| failed(e.to_string()))
}

async fn load_pipeline(config: &SimConfig) -> Result<ModelPipeline, SimServerError> {
    let dir = config.tokenizer_dir.clone();
    let block_size = config.engine.block_size;
    let seed = HashSeed::from_env_value(config.hash_seed.clone());
    tokio::task::spawn_blocking(move || {
        ModelPipeline::load(&dir, block_size, &seed)
            .map_err(|source| SimServerError::Tokenizer { dir, source })
    })
    .await
    .map_err(|e| SimServerError::Task(e.to_string()))?
}

fn start_pusher(
    config: &SimConfig,
    push: &PushSettings,
    addr: SocketAddr,
    state: &Arc<Mutex<EngineState>>,
) -> Result<Pusher, SimServerError> {
    let client = FleetClient::new(FleetClientConfig::new(
        push.fleet_url.clone(),
        push.token.clone(),
    ))?;
    let identity = WorkerIdentity {
        worker_id: config.worker_id.clone(),
        model: config.model.clone(),
        url: push
            .advertise_url
            .clone()
            .unwrap_or_else(|| format!("http://{addr}")),
        // Both is what no role means: its heartbeat stays as it was.
        role: (config.role != WorkerRole::Both).then_some(config.role),
    };
    let pusher_config = PusherConfig {
        flush_interval: push.flush_interval,
        sync_interval: push.sync_interval,
        heartbeat_interval: push.heartbeat_interval,
        drop_evictions: config.faults.drop_evictions,
        seed: push.seed,
        paused: config.faults.stop_reporting,
        family_blocks: Some(config.engine.family_blocks),
        ..PusherConfig::new(identity)
    };
    Ok(Pusher::start(
        client,
        pusher_config,
        SimCore::block_source(state),
    ))
}

async fn serve(listener: tokio::net::TcpListener, app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let router = app::router(app);
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    if let Err(e) = axum::serve(without_nagle(listener), router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(error = %e, "sim-worker HTTP server stopped");
    }
}

/// `listener`, its connections with `TCP_NODELAY` as vLLM's (uvicorn on
/// asyncio sets it on every connection): with Nagle's algorithm on, a
/// stream's second small write waits for the ACK of the first, which the
/// client may delay by up to 40 ms (a router assembling a non-streamed
/// answer from a one-token stream saw +40 ms at p99).
fn without_nagle(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
    })
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    /// Every connection the sim accepts sends small writes at once.
    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut listener = super::without_nagle(tcp);
        let client = tokio::spawn(tokio::net::TcpStream::connect(addr));
        let (accepted, _) = listener.accept().await;
        assert!(accepted.nodelay().unwrap(), "TCP_NODELAY on");
        drop(client.await.unwrap().unwrap());
    }
}
