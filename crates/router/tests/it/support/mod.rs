//! Test support: a real valkey-server on an ephemeral loopback port, a
//! router served in-process, and a reader of the raw state in Valkey (the
//! state suite's support); and child processes, started through `fleet`:
//! routers, reporters, `prefix-router` commands.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub mod counts;
pub mod fake_worker;

pub mod reporter_process;
pub mod router_process;
pub mod tls;

// The state suite's support (Valkey, stores, the raw state): one
// definition, shared by path.
#[path = "../../../../state/tests/it/support.rs"]
mod state_support;
pub use state_support::*;

use prefix_router::{ServeArgs, ServeConfig};

/// The real Qwen3 tokenizer of `../shared`.
pub fn tokenizer_dir() -> PathBuf {
    fleet::binaries::shared_tokenizer_dir()
}

pub use fleet::free_port;

/// The `prefix-router` binary of this test's profile (`target/<profile>/`,
/// beside `deps/`; `cargo test --workspace` builds it with the tests).
pub fn router_bin() -> PathBuf {
    fleet::binaries::workspace_binary("prefix-router").unwrap()
}

/// `prefix-router <sub>` run to completion (log level `warn`):
/// [`fleet::ProcSpec::output`].
pub fn router_command(sub: &str) -> fleet::ProcSpec {
    fleet::ProcSpec::quiet(sub, router_bin())
        .arg(sub)
        .env("PREFIX_ROUTER_LOG", "warn")
}

/// A router served in-process on an ephemeral port.
pub struct Router {
    /// Its address.
    pub addr: SocketAddr,
    /// Its internal listener's address, when started with one
    /// ([`Router::start_split`]).
    pub internal: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The internal token the test routers use.
pub const TOKEN: &str = "test-token";

impl Router {
    /// A router on `valkey` with `args` (listen, valkey and token are filled in).
    pub async fn start(valkey_url: &str, args: ServeArgs) -> Router {
        Self::launch(valkey_url, args, false, None).await
    }

    /// As [`Router::start`], run as `prefix-router epp`: the ext_proc gRPC
    /// service on `grpc` too, assuming `body_mode` when Envoy names none.
    pub async fn start_epp(
        valkey_url: &str,
        args: ServeArgs,
        grpc: SocketAddr,
        body_mode: prefix_router::BodyMode,
    ) -> Router {
        Self::start_epp_with(
            valkey_url,
            args,
            prefix_router::EppSettings::new(grpc, body_mode),
        )
        .await
    }

    /// As [`Router::start_epp`], with the picker's own settings.
    pub async fn start_epp_with(
        valkey_url: &str,
        args: ServeArgs,
        epp: prefix_router::EppSettings,
    ) -> Router {
        Self::launch(valkey_url, args, false, Some(epp)).await
    }

    /// As [`Router::start`], with a second, internal listener on another
    /// ephemeral port (`--internal-listen`).
    pub async fn start_split(valkey_url: &str, args: ServeArgs) -> Router {
        Self::launch(valkey_url, args, true, None).await
    }

    async fn launch(
        valkey_url: &str,
        mut args: ServeArgs,
        split: bool,
        epp: Option<prefix_router::EppSettings>,
    ) -> Router {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let internal = if split {
            Some(
                tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind internal"),
            )
        } else {
            None
        };
        let internal_addr = internal.as_ref().map(|l| l.local_addr().expect("addr"));
        args.listen = Some(addr);
        args.exposure.internal_listen = internal_addr;
        args.valkey = Some(valkey_url.to_owned());
        // Tests share 2 cores: a routing deadline of 250 ms would turn CPU
        // starvation into fallback routing. Deadline tests set their own.
        if args.valkey_timeout.is_none() {
            args.valkey_timeout = Some(Duration::from_secs(2));
        }
        if args.internal_token.is_none() && !args.allow_unauthenticated_internal {
            args.internal_token = Some(TOKEN.into());
        }
        let mut cfg = ServeConfig::resolve(args).expect("config");
        cfg.epp = epp;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let shutdown = async move {
            let _ = rx.await;
            let _ = stop_tx.send(true);
        };
        let task = tokio::spawn(async move {
            prefix_router::serve_with(listener, internal, cfg, stop_rx, shutdown)
                .await
                .expect("serve");
        });
        Router {
            addr,
            internal: internal_addr,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// `http://<internal addr><path>`; panics without an internal listener.
    pub fn internal_url(&self, path: &str) -> String {
        let addr = self.internal.expect("started without an internal listener");
        format!("http://{addr}{path}")
    }

    /// True while its serving task has neither returned nor panicked.
    pub fn is_running(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// `http://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Stops it and waits until it has.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

/// A client that sends the internal token.
pub fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// POSTs JSON with the test token; returns (status, body as JSON or Null).
pub async fn post(r: &Router, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let resp = http()
        .post(r.url(path))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

/// GETs with the test token; returns (status, body as JSON or Null).
pub async fn get(r: &Router, path: &str) -> (u16, serde_json::Value) {
    let resp = http()
        .get(r.url(path))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

/// GETs `/metrics` with the test token.
pub async fn metrics_text(r: &Router) -> String {
    http()
        .get(r.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("metrics")
}

/// Registers worker `id` for model [`M`] through router `r`.
pub async fn register(r: &Router, id: &str) {
    let body = serde_json::json!({"worker_id": id, "url": "http://127.0.0.1:9", "model": M});
    let (st, resp) = post(r, "/internal/heartbeat", &body).await;
    assert_eq!(st, 200, "{resp}");
}

/// `ServeArgs` with nothing set.
pub fn args() -> ServeArgs {
    let mut a = ServeArgs::default();
    // The fake workers answer non-streamed requests as JSON: they are
    // forwarded as they came (`migration_whole` tests the other way).
    a.migration.migrate_unstreamed = Some(false);
    a
}
