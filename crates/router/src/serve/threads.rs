//! Thread per core: the binary serves on `--async-threads` threads, each a
//! single-threaded runtime with its own accept loop on the same listening
//! sockets and its own connections to Valkey and to workers
//! (`state::serving_thread`), so that an I/O event wakes only the thread
//! whose request waits on it (a multi-threaded runtime woke both of two
//! threads on most events: a connection's driver task and its caller ran
//! on either). Thread 0 is the one that called [`run`]: it also runs the
//! router's duties, the picker's gRPC service, and the end of its leases.
//!
//! The threads accept on one socket (`try_clone`d), not one socket each
//! (`SO_REUSEPORT`): a new connection wakes every idle thread and the
//! first one free takes it, whereas the kernel's hash would place the few
//! long connections a load balancer keeps to a router regardless of how
//! busy each thread is; and nothing else can bind the port beside it.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use anyhow::Context;
use tokio::sync::{oneshot, watch};

use super::{Addrs, Serving, Started, wait_for_signal};
use crate::config::ServeConfig;
use state::StateStore;

/// Serves until SIGINT/SIGTERM on `cfg.async_threads` threads, then ends
/// this router's leases (after every thread has drained).
pub fn run(mut cfg: ServeConfig) -> anyhow::Result<()> {
    crate::memory::tune();
    let threads = cfg.async_threads.max(1);
    cfg.valkey.serving_threads = threads;
    let public = bind(cfg.listen)?;
    let internal = cfg.internal_listen.map(bind).transpose()?;
    let runtime = single_threaded(0).context("starting the async runtime")?;
    let (result, others) = runtime.block_on(serve_threads(cfg, public, internal, threads));
    // Its tasks go, the shutdown signal's sender with them: threads still
    // serving after a failed start see it and stop.
    drop(runtime);
    for handle in others {
        if handle.join().is_err() {
            tracing::error!("a serving thread panicked");
        }
    }
    result
}

/// A runtime for serving thread `index` (its blocking threads, where the
/// CPU pool's jobs run, named after it).
fn single_threaded(index: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .thread_name(format!("blocking-{index}"))
        .enable_all()
        .build()
}

/// A listening socket every serving thread accepts on.
fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
    listener
        .set_nonblocking(true)
        .with_context(|| format!("listening on {addr}"))?;
    Ok(listener)
}

/// `listener` registered with the current thread's runtime.
fn on_this_thread(listener: &std::net::TcpListener) -> anyhow::Result<tokio::net::TcpListener> {
    let own = listener
        .try_clone()
        .context("sharing the listening socket")?;
    tokio::net::TcpListener::from_std(own).context("registering the listening socket")
}

/// What thread `index` (from 1) serves with.
struct ThreadPart {
    index: usize,
    serving: Serving,
    store: StateStore,
    public: std::net::TcpListener,
    internal: Option<std::net::TcpListener>,
    down: watch::Receiver<bool>,
    /// Told when the thread has stopped serving (with how it ended).
    served: oneshot::Sender<anyhow::Result<()>>,
    /// True once the router has ended its leases: the thread's runtime
    /// (its connections, the tasks spawned on it) lives until then.
    finished: watch::Receiver<bool>,
}

/// Thread 0: starts the router, the other threads, serves, and once all
/// have drained, ends the leases. The other threads' handles, to join.
async fn serve_threads(
    cfg: ServeConfig,
    public: std::net::TcpListener,
    internal: Option<std::net::TcpListener>,
    threads: usize,
) -> (anyhow::Result<()>, Vec<JoinHandle<()>>) {
    let (finished_tx, finished_rx) = watch::channel(false);
    let mut others = Vec::new();
    let result = async {
        let addrs = Addrs {
            public: public.local_addr()?,
            internal: internal.as_ref().map(|l| l.local_addr()).transpose()?,
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let (down_tx, down_rx) = watch::channel(false);
        let router = Started::start(cfg, addrs, stop_rx).await?;
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = stop_tx.send(true);
            let _ = down_tx.send(true);
        });
        let picker = router.spawn_picker(down_rx.clone()).await?;
        let mut served = Vec::new();
        for index in 1..threads {
            let (tx, rx) = oneshot::channel();
            let part = ThreadPart {
                index,
                serving: router.serving.clone(),
                store: router.store.clone(),
                public: public.try_clone().context("sharing the listening socket")?,
                internal: (internal.as_ref().map(|l| l.try_clone()))
                    .transpose()
                    .context("sharing the listening socket")?,
                down: down_rx.clone(),
                served: tx,
                finished: finished_rx.clone(),
            };
            let handle = std::thread::Builder::new()
                .name(format!("serve-{index}"))
                .spawn(move || serve_thread(part))
                .context("starting a serving thread")?;
            others.push(handle);
            served.push(rx);
        }
        let own = async {
            let public = on_this_thread(&public)?;
            let internal = internal.as_ref().map(on_this_thread).transpose()?;
            router.serving.serve(public, internal, down_rx).await
        }
        .await;
        let mut outcome = own;
        for (i, rx) in served.into_iter().enumerate() {
            let theirs = rx
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("serving thread {} ended", i + 1)));
            outcome = outcome.and(theirs);
        }
        let finished = router.finish(picker).await;
        outcome.and(finished)
    }
    .await;
    let _ = finished_tx.send(true);
    (result, others)
}

/// A serving thread other than 0: its own runtime, connections, and
/// accept loops, until shutdown; then it waits for the router to finish.
fn serve_thread(part: ThreadPart) {
    state::set_serving_thread(part.index);
    let runtime = match single_threaded(part.index) {
        Ok(rt) => rt,
        Err(e) => {
            let _ = part
                .served
                .send(Err(anyhow::Error::new(e).context("a serving runtime")));
            return;
        }
    };
    let ThreadPart {
        serving,
        store,
        public,
        internal,
        down,
        served,
        mut finished,
        ..
    } = part;
    runtime.block_on(async move {
        // This thread's routing lane, before its first request.
        if let Err(e) = store.connect().await {
            tracing::debug!(error = %e, "routing lane of a serving thread not connected yet");
        }
        let result = async {
            let public = on_this_thread(&public)?;
            let internal = internal.as_ref().map(on_this_thread).transpose()?;
            serving.serve(public, internal, down).await
        }
        .await;
        let _ = served.send(result);
        let _ = finished.wait_for(|f| *f).await;
    });
}
