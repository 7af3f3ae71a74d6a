//! `prefix-router serve`: the HTTP server and its background duties.
//!
//! * this module: the store, pipelines and proxy built from the config, the
//!   listeners, graceful shutdown.
//! * `duties`: the one loop a router runs its duties in until shutdown (its leases and the
//!   static workers', gc, the drain marks) and the leases' end.

mod duties;

use duties::{Duties, duties_loop, end_router_leases};

use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use std::sync::Arc;

use crate::admission::Admission;
use crate::api::{
    self, AppState, ConnGuard, ConnLimits, GuardedListener, HttpLimits, InternalAuth, Surface,
};
use crate::config::ServeConfig;
use crate::flow::FlowControl;
use crate::lmcache::LmCache;
use crate::load_scrape::{ScrapeSettings, scrape_loop};
use crate::metrics_recorder::{metrics_handle, zero_counters};
use crate::proxy::{CpuPool, Proxy, Upstream};
use crate::response_cache::ResponseCache;
use crate::routing::policy_by_name;
use protocol::redact_url;
use state::StateStore;
use tokenize::ModelPipelines;

/// Tells background loops to stop (true once shutting down).
pub type ShutdownSignal = tokio::sync::watch::Receiver<bool>;

/// Builds the store described by `cfg`.
pub fn build_store(cfg: &ServeConfig) -> anyhow::Result<StateStore> {
    let store = StateStore::new(
        cfg.valkey.clone(),
        &cfg.key_prefix,
        &cfg.router_id,
        cfg.ttls.clone(),
        cfg.limits.clone(),
    )
    .context("configuring the valkey store")?;
    store.set_model_limits(cfg.model_limits);
    store
        .set_sharding(cfg.sharding)
        .context("configuring the valkey store")?;
    Ok(store)
}

/// Every configured model's pipeline (tokenizer, block size, seed) and
/// LoRA adapters.
fn build_pipelines(cfg: &ServeConfig) -> anyhow::Result<ModelPipelines> {
    let pipelines = crate::models::pipelines(&cfg.models)?;
    if cfg.models.is_empty() {
        tracing::warn!(
            "no --model/--tokenizer-dir nor [[models]]: requests are routed by load only, without prefix locality"
        );
    }
    Ok(pipelines)
}

/// The routing path: the configured models' pipelines, policy and client.
fn build_proxy(cfg: &ServeConfig, store: StateStore) -> anyhow::Result<Proxy> {
    let pipelines = build_pipelines(cfg)?;
    let cache_aware = cfg.cache_aware;
    let policy = policy_by_name(&cfg.policy, cache_aware)
        .with_context(|| format!("unknown policy {:?}", cfg.policy))?;
    let upstream = Upstream::new(Duration::from_secs(2)).context("building the HTTP client")?;
    let atomic = (policy.name() == "cache_aware").then_some(cache_aware);
    let cache = (cfg.response_cache.clone())
        .map(|s| ResponseCache::new(store.clone(), s, cfg.valkey.hot_timeout));
    let flow = (cfg.flow.clone()).map(|s| FlowControl::new(store.clone(), s));
    let admission = Arc::new(Admission::new(cfg.admission.clone(), store.clone()));
    let lmcache = (cfg.lmcache.clone())
        .map(LmCache::new)
        .transpose()
        .context("building the LMCache controller's client")?;
    let proxy = Proxy::new(store, pipelines, policy, atomic, upstream, cfg.max_attempts)
        .with_admission(admission);
    let proxy = match cfg.max_prompt_tokens {
        Some(max) => proxy.with_max_prompt_tokens(max),
        None => proxy,
    };
    Ok(proxy
        .with_cpu_pool(CpuPool::new(cfg.tokenize_threads, cfg.tokenize_queue))
        .with_known_for(cfg.ttls.worker_lease)
        .with_pd_skip_prefill_share(cfg.pd_skip_prefill_share)
        .with_pd_prefill_policy(cfg.pd_prefill_policy)
        .with_response_cache(cache)
        .with_migration(cfg.migration)
        .with_lmcache(lmcache)
        .with_flow_control(flow))
}

/// The async runtime `cfg` asks for: a single thread for
/// `--async-threads 1` (no wake-ups between threads), else that many workers.
pub fn runtime(cfg: &ServeConfig) -> std::io::Result<tokio::runtime::Runtime> {
    crate::memory::tune();
    let mut builder = if cfg.async_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(cfg.async_threads);
        b
    };
    builder.enable_all().build()
}

/// Serves until SIGINT/SIGTERM, then ends this router's leases.
pub async fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    let listener = TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding {}", cfg.listen))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        wait_for_signal().await;
        let _ = stop_tx.send(true);
    };
    serve_on(listener, cfg, stop_rx, shutdown).await
}

/// Serves on `listener` until `shutdown` completes (used by tests too).
/// With `--internal-listen`, binds it and serves the internal routes there.
pub async fn serve_on(
    listener: TcpListener,
    cfg: ServeConfig,
    stop: ShutdownSignal,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let internal = match cfg.internal_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the internal listener {addr}"))?,
        ),
        None => None,
    };
    serve_with(listener, internal, cfg, stop, shutdown).await
}

/// Serves the public routes on `public` and, when `internal` is given, the
/// internal ones (`/internal/*`, `/admin/*`, `/metrics`) only on it;
/// without it, everything on `public`. Until `shutdown` completes.
pub async fn serve_with(
    public: TcpListener,
    internal: Option<TcpListener>,
    cfg: ServeConfig,
    stop: ShutdownSignal,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let store = build_store(&cfg)?;
    let auth = match &cfg.internal_token {
        Some(t) => InternalAuth::token(t),
        None => {
            tracing::warn!(
                "INTERNAL ROUTES ARE UNAUTHENTICATED (--allow-unauthenticated-internal): anyone who reaches this port can rewrite the fleet's state"
            );
            InternalAuth::disabled()
        }
    };
    if let Err(e) = store.connect().await {
        tracing::warn!(error = %e, "routing lane not connected yet; routing falls back until it is");
    }
    match store.load_scripts().await {
        Ok(()) => tracing::info!("scripts loaded"),
        Err(e) => tracing::warn!(error = %e, "valkey not reachable yet; will retry on demand"),
    }
    // Loading tokenizers takes seconds of CPU: off the async workers, which
    // may be serving other things (tests run routers in their runtime).
    let proxy = {
        let (cfg, store) = (cfg.clone(), store.clone());
        tokio::task::spawn_blocking(move || build_proxy(&cfg, store))
            .await
            .context("loading the models")??
    };
    let app = AppState {
        store: store.clone(),
        default_model: cfg.model.clone(),
        metrics: {
            let handle = metrics_handle()?;
            zero_counters();
            handle
        },
        proxy: Arc::new(proxy),
        forward_paths: Arc::new(cfg.forward_paths.clone()),
        listeners: Arc::new(
            std::iter::once(public.local_addr()?)
                .chain(internal.as_ref().map(|l| l.local_addr()).transpose()?)
                .collect(),
        ),
    };
    let admission = app.proxy.admission().clone();
    // Leases, gc and the drain marks (relays move answers at a drain's
    // deadline, and the fallback, Valkey away, skips draining workers,
    // migration on or off).
    let duties = Duties {
        store: store.clone(),
        cfg: cfg.clone(),
        admission: admission.clone(),
        proxy: app.proxy.clone(),
    };
    let mut tasks = vec![
        tokio::spawn(duties_loop(duties, stop.clone())),
        tokio::spawn(admission.lease_loop(stop.clone())),
    ];
    if let Some(lm) = app.proxy.lmcache() {
        tasks.push(tokio::spawn(lm.poll_loop(stop.clone())));
    }
    if let Some(interval) = cfg.scrape_metrics_interval {
        let settings = ScrapeSettings::every(interval);
        tasks.push(tokio::spawn(scrape_loop(
            store.clone(),
            settings,
            stop.clone(),
        )));
    }
    let internal_addr = internal.as_ref().map(|l| l.local_addr()).transpose()?;
    tracing::info!(
        listen = %public.local_addr()?,
        internal_listen = ?internal_addr,
        valkey = %redact_url(&cfg.valkey.url),
        router_id = %cfg.router_id,
        "serving"
    );
    let limits = HttpLimits {
        max_body_bytes: cfg.max_body_bytes,
        client_timeout: cfg.client_timeout,
    };
    // One shutdown signal, fanned out to every listener.
    let (down_tx, down_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = down_tx.send(true);
    });
    let picker = crate::epp::spawn(&cfg, app.proxy.clone(), store.clone(), down_rx.clone()).await?;
    let public_surface = if internal.is_some() {
        Surface::Public
    } else {
        Surface::All
    };
    let conn_limits = ConnLimits {
        head_timeout: cfg.client_timeout,
        idle_timeout: cfg.idle_timeout,
        max_connections: cfg.max_connections,
    };
    let public_server = serve_listener(
        public,
        api::router(app.clone(), auth.clone(), limits, public_surface),
        conn_limits,
        down_rx.clone(),
    );
    match internal {
        Some(l) => {
            let internal_server = serve_listener(
                l,
                api::router(app, auth, limits, Surface::Internal),
                conn_limits,
                down_rx,
            );
            // Both stop on the same signal; axum's server returns only then.
            tokio::try_join!(public_server, internal_server)?;
        }
        None => public_server.await?,
    }
    if let Some(picker) = picker {
        picker.await??;
    }
    for t in tasks {
        let _ = t.await;
    }
    end_router_leases(&store).await;
    Ok(())
}

/// Serves `routes` on `listener` (slow, idle and surplus clients cut off
/// as `limits` says, see [`GuardedListener`]) until `down` turns true.
async fn serve_listener(
    listener: TcpListener,
    routes: axum::Router,
    limits: ConnLimits,
    mut down: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let listener = GuardedListener::new(listener, limits);
    axum::serve(
        listener,
        routes.into_make_service_with_connect_info::<ConnGuard>(),
    )
    .with_graceful_shutdown(async move {
        let _ = down.wait_for(|d| *d).await;
    })
    .await
    .context("http server")
}

/// Ctrl-C or SIGTERM: how every long-running command is stopped.
pub async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
