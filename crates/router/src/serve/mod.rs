//! `prefix-router serve`: the HTTP server and its background duties.
//!
//! * this module: a router started (its duties spawned), what its serving
//!   threads share, the listeners, graceful shutdown; [`serve_with`] serves
//!   in the caller's runtime (tests).
//! * `build`: the store, pipelines and proxy built from the config.
//! * `threads`: thread per core, what the binary runs ([`run`]): one
//!   single-threaded runtime per serving thread, each accepting on the
//!   same sockets with its own connections.
//! * `duties`: the one loop a router runs its duties in until shutdown (its leases and the
//!   static workers', gc, the drain marks) and the leases' end.

mod build;
mod duties;
mod threads;

use build::{build_proxy, build_store};
use duties::{Duties, duties_loop, end_router_leases};
pub use threads::run;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::api::{
    self, AppState, ConnGuard, ConnLimits, GuardedListener, HttpLimits, InternalAuth, Surface,
};
use crate::config::ServeConfig;
use crate::load_scrape::{ScrapeSettings, scrape_loop};
use crate::metrics_recorder::{metrics_handle, zero_counters};
use protocol::redact_url;
use state::StateStore;

/// Tells background loops to stop (true once shutting down).
pub type ShutdownSignal = tokio::sync::watch::Receiver<bool>;

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
/// without it, everything on `public`. Until `shutdown` completes. All in
/// the caller's runtime (tests run routers so); the binary serves on one
/// runtime per thread ([`run`]).
pub async fn serve_with(
    public: TcpListener,
    internal: Option<TcpListener>,
    mut cfg: ServeConfig,
    stop: ShutdownSignal,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    cfg.valkey.serving_threads = 1;
    let addrs = Addrs {
        public: public.local_addr()?,
        internal: internal.as_ref().map(|l| l.local_addr()).transpose()?,
    };
    let router = Started::start(cfg, addrs, stop).await?;
    // One shutdown signal, fanned out to every listener.
    let (down_tx, down_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = down_tx.send(true);
    });
    let picker = router.spawn_picker(down_rx.clone()).await?;
    router.serving.serve(public, internal, down_rx).await?;
    router.finish(picker).await
}

/// A router's listening addresses.
#[derive(Debug, Clone, Copy)]
struct Addrs {
    public: std::net::SocketAddr,
    internal: Option<std::net::SocketAddr>,
}

/// A router started: its store, what its serving threads share, and its
/// background duties running (once per router, on the runtime that
/// started it).
struct Started {
    cfg: ServeConfig,
    store: StateStore,
    serving: Serving,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Started {
    /// Builds the store, the routing path and the app state from `cfg`
    /// (its Valkey settings name the serving threads), and spawns the
    /// duties on the current runtime.
    async fn start(cfg: ServeConfig, addrs: Addrs, stop: ShutdownSignal) -> anyhow::Result<Self> {
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
                std::iter::once(addrs.public)
                    .chain(addrs.internal)
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
        tracing::info!(
            listen = %addrs.public,
            internal_listen = ?addrs.internal,
            valkey = %redact_url(&cfg.valkey.url),
            router_id = %cfg.router_id,
            serving_threads = cfg.valkey.serving_threads,
            "serving"
        );
        let serving = Serving {
            app,
            auth,
            limits: HttpLimits {
                max_body_bytes: cfg.max_body_bytes,
                client_timeout: cfg.client_timeout,
            },
            conn_limits: ConnLimits {
                head_timeout: cfg.client_timeout,
                idle_timeout: cfg.idle_timeout,
                max_connections: cfg.max_connections,
            },
            open_public: Arc::default(),
            open_internal: Arc::default(),
        };
        Ok(Started {
            cfg,
            store,
            serving,
            tasks,
        })
    }

    /// The endpoint picker's gRPC service (`epp`), once per router.
    async fn spawn_picker(
        &self,
        down: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Option<tokio::task::JoinHandle<anyhow::Result<()>>>> {
        let proxy = self.serving.app.proxy.clone();
        crate::epp::spawn(&self.cfg, proxy, self.store.clone(), down).await
    }

    /// Once every listener has stopped: waits for the picker and the
    /// duties, then ends this router's leases.
    async fn finish(
        self,
        picker: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    ) -> anyhow::Result<()> {
        if let Some(picker) = picker {
            picker.await??;
        }
        for t in self.tasks {
            let _ = t.await;
        }
        end_router_leases(&self.store).await;
        Ok(())
    }
}

/// What every serving thread of a router shares to serve its listeners:
/// the app state (one routing path, store, admission, flow control,
/// response cache, metrics), the limits, and the open connections counted
/// per socket.
#[derive(Clone)]
struct Serving {
    app: AppState,
    auth: InternalAuth,
    limits: HttpLimits,
    conn_limits: ConnLimits,
    open_public: Arc<AtomicUsize>,
    open_internal: Arc<AtomicUsize>,
}

impl Serving {
    /// Serves the public routes on `public` and the internal ones on
    /// `internal` (all on `public` without it) until `down` turns true.
    async fn serve(
        &self,
        public: TcpListener,
        internal: Option<TcpListener>,
        down: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let surface = if internal.is_some() {
            Surface::Public
        } else {
            Surface::All
        };
        let routes =
            |surface| api::router(self.app.clone(), self.auth.clone(), self.limits, surface);
        let public =
            GuardedListener::new(public, self.conn_limits).counting_in(self.open_public.clone());
        let public_server = serve_listener(public, routes(surface), down.clone());
        match internal {
            Some(l) => {
                let l = GuardedListener::new(l, self.conn_limits)
                    .counting_in(self.open_internal.clone());
                let internal_server = serve_listener(l, routes(Surface::Internal), down);
                // Both stop on the same signal; axum's server returns only then.
                tokio::try_join!(public_server, internal_server)?;
                Ok(())
            }
            None => public_server.await,
        }
    }
}

/// Serves `routes` on `listener` (slow, idle and surplus clients cut off
/// as its limits say, see [`GuardedListener`]) until `down` turns true.
async fn serve_listener(
    listener: GuardedListener,
    routes: axum::Router,
    mut down: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
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
