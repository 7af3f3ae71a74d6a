//! `prefix-router epp`: the router as a Gateway API Inference Extension
//! endpoint picker. Envoy calls it over the ext_proc gRPC protocol for
//! each request; it tokenizes and routes exactly as `serve` does (same
//! shared state, same atomic claim) and tells Envoy where to send the
//! request, in the `x-gateway-destination-endpoint` header and the
//! `envoy.lb` dynamic metadata (GIE's Endpoint Picker Protocol); Envoy
//! forwards it itself. A disaggregated model's request goes to its decode
//! worker, and the prefill worker is named in `x-prefiller-host-port` for
//! the decode worker's sidecar, as llm-d's P/D does (`proxy::pd`).
//!
//! Layout (each uses only those above it):
//!
//! * `wire`: the ext_proc messages and gRPC service, hand-written for what
//!   the picker uses (also what the tests speak to it with).
//! * `messages`: the answers: continue, destination, body handed back,
//!   immediate error.
//! * `metadata`: what is read from Envoy's messages (headers, subset hint,
//!   served endpoint), and worker URLs as `ip:port`.
//! * `body_mode`: how a body reaches the picker in one stream (Envoy's
//!   processing mode, or `--body-mode`).
//! * `exchange`: one request's stream, message by message.
//! * `tls`: the gRPC port's TLS with client certificates.
//! * this file: the gRPC services (ext_proc and health) and their listener.
//!
//! Below: `proxy` ([`Proxy::pick`]), `config` (`EppSettings`).

mod body_mode;
mod exchange;
mod messages;
mod metadata;
mod tls;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use state::StateStore;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Status, Streaming};
use tonic_health::ServingStatus;

use crate::config::{BodyMode, GrpcTls, ServeConfig};
use crate::proxy::Proxy;
use exchange::{Exchange, Step};
use wire::{ExternalProcessorServer, ProcessingRequest, Processor, ResponseStream};

/// How long open streams may finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// The gRPC service names whose health the picker reports, as GIE's do.
const HEALTH_SERVICES: [&str; 3] = [
    "liveness",
    "readiness",
    "envoy.service.ext_proc.v3.ExternalProcessor",
];

/// What every stream shares.
struct EppContext {
    proxy: Arc<Proxy>,
    body_mode: BodyMode,
    max_body_bytes: usize,
    /// Deadline of a request's headers and body.
    request_timeout: Duration,
    /// Deadline of the rest of an exchange, from its pick.
    response_timeout: Duration,
    /// Streams open at once.
    max_streams: usize,
    /// The model of requests without a body.
    default_model: Option<String>,
}

struct Picker {
    ctx: Arc<EppContext>,
    streams: Arc<Semaphore>,
}

impl Processor for Picker {
    fn process(&self, mut inbound: Streaming<ProcessingRequest>) -> Result<ResponseStream, Status> {
        // Each stream holds a task and up to a body's bytes: at most
        // --epp-max-streams streams at once.
        let Ok(permit) = self.streams.clone().try_acquire_owned() else {
            metrics::counter!("prefix_router_epp_picks_total", "outcome" => "too_many_streams")
                .increment(1);
            return Err(Status::resource_exhausted(format!(
                "the endpoint picker has {} streams open, as many as --epp-max-streams allows",
                self.ctx.max_streams
            )));
        };
        let (tx, rx) = mpsc::channel(16);
        let ctx = self.ctx.clone();
        // The exchange (and the in-flight count it holds) lives as long as
        // Envoy's stream: to the response's end, until Envoy goes away, or
        // until --epp-response-timeout after the pick.
        tokio::spawn(async move {
            // The request (headers and body) must arrive within the client
            // timeout, as on `serve`'s listener; the response within the
            // response timeout from the pick.
            let mut deadline = tokio::time::Instant::now() + ctx.request_timeout;
            let response_timeout = ctx.response_timeout;
            let mut exchange = Exchange::new(ctx);
            let mut picked = false;
            loop {
                if !picked && exchange.picked() {
                    picked = true;
                    deadline = tokio::time::Instant::now() + response_timeout;
                }
                let next = match tokio::time::timeout_at(deadline, inbound.message()).await {
                    Ok(next) => next,
                    Err(_) if picked => {
                        // The count is released now, not when (if ever)
                        // the gateway closes the stream.
                        exchange.finish();
                        metrics::counter!("prefix_router_epp_picks_total", "outcome" => "response_timeout")
                            .increment(1);
                        let _ = tx
                            .send(Err(Status::deadline_exceeded(
                                "the exchange outlasted --epp-response-timeout after its pick",
                            )))
                            .await;
                        break;
                    }
                    Err(_) => {
                        let _ = tx.send(Ok(*exchange.timed_out())).await;
                        break;
                    }
                };
                let message = match next {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(status) => {
                        // A message over the size limit, or the gateway's
                        // stream broken: the stream ends with an error
                        // status, never with OK and no answer.
                        tracing::debug!(%status, "ext_proc stream ended by an error");
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                };
                match exchange.on(message).await {
                    Step::Send(answers) => {
                        for a in answers {
                            if tx.send(Ok(a)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Step::Stop(answer) => {
                        let _ = tx.send(Ok(*answer)).await;
                        break;
                    }
                }
            }
            exchange.finish();
            drop(permit);
        });
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

/// Serves ext_proc and gRPC health on `listener` until `down` turns true.
/// Readiness follows Valkey (checked every second), or the proxy's
/// fallback: a picker that can still route by the workers it last saw
/// stays ready when Valkey is away.
async fn serve(
    listener: TcpListener,
    ctx: EppContext,
    store: StateStore,
    tls: Option<GrpcTls>,
    mut down: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let (reporter, health) = tonic_health::server::health_reporter();
    for name in HEALTH_SERVICES {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    reporter
        .set_service_status("liveness", ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    let ctx = Arc::new(ctx);
    let proxy = ctx.proxy.clone();
    let mut health_down = down.clone();
    let readiness = tokio::spawn(async move {
        loop {
            let ready = store.ping().await.is_ok() || proxy.knows_workers();
            let status = if ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            for name in &HEALTH_SERVICES[1..] {
                reporter.set_service_status(*name, status).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = health_down.wait_for(|d| *d) => break,
            }
        }
        for name in HEALTH_SERVICES {
            reporter
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
    });
    let max_message = ctx.max_body_bytes.saturating_add(1 << 20);
    let streams = Arc::new(Semaphore::new(ctx.max_streams));
    let ext_proc = ExternalProcessorServer::from_arc(Arc::new(Picker { ctx, streams }))
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message);
    let addr = listener.local_addr()?;
    tracing::info!(grpc_listen = %addr, tls = tls.is_some(), "endpoint picker serving ext_proc");
    // A gateway that vanished without closing its connections is found by
    // keepalives; its streams end, and with them their in-flight counts.
    let mut stopping = down.clone();
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &tls {
        builder = builder
            .tls_config(tls::server_config(tls)?)
            .context("the gRPC port's TLS")?;
    }
    let server = builder
        .tcp_nodelay(true)
        .tcp_keepalive(Some(Duration::from_secs(30)))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(health)
        .add_service(ext_proc)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
            let _ = down.wait_for(|d| *d).await;
        });
    // Streams still open at shutdown get a grace period, not forever.
    let served = tokio::select! {
        served = server => served.context("ext_proc gRPC server"),
        _ = async {
            let _ = stopping.wait_for(|d| *d).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!("ext_proc streams still open after the shutdown grace; closing them");
            Ok(())
        }
    };
    let _ = readiness.await;
    served
}

/// Starts the picker when `cfg` asks for one (`prefix-router epp`): binds
/// its listener (an error if it cannot) and serves until `down`.
pub async fn spawn(
    cfg: &ServeConfig,
    proxy: Arc<Proxy>,
    store: StateStore,
    down: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<anyhow::Result<()>>>> {
    let Some(settings) = &cfg.epp else {
        return Ok(None);
    };
    let listener = TcpListener::bind(settings.grpc_listen)
        .await
        .with_context(|| format!("binding the ext_proc listener {}", settings.grpc_listen))?;
    let ctx = EppContext {
        proxy,
        body_mode: settings.body_mode,
        max_body_bytes: cfg.max_body_bytes,
        request_timeout: cfg.client_timeout,
        response_timeout: settings.response_timeout,
        max_streams: settings.max_streams.unwrap_or(cfg.max_connections),
        default_model: cfg.model.clone(),
    };
    // A TLS file that cannot be read stops the start, before serving.
    if let Some(tls) = &settings.tls {
        tls::server_config(tls)?;
    }
    let tls = settings.tls.clone();
    Ok(Some(tokio::spawn(serve(listener, ctx, store, tls, down))))
}
