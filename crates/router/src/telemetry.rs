//! Logs, and optionally routing spans exported over OTLP: one `route` span
//! per request (its parent the client's W3C `traceparent`), with
//! `tokenize`, `hash`, `valkey` and `upstream` below it; the worker is sent
//! the `upstream` span as its parent. Without `--otlp-endpoint` nothing is
//! exported and `traceparent` is forwarded as the client sent it.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;

use crate::config::OtlpSettings;
use axum::http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The target of the routing spans: only these are exported.
pub const SPANS: &str = "prefix_router::spans";

/// Whether spans are exported (then trace context is taken from clients
/// and handed to workers by the router itself).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Flushes the exported spans when dropped (at exit).
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take()
            && let Err(e) = p.shutdown()
        {
            eprintln!("flushing the OTLP spans: {e}");
        }
    }
}

/// Installs the process's logger (`PREFIX_ROUTER_LOG`, default `info`) and,
/// with `otlp`, the span exporter.
pub fn init(otlp: Option<&OtlpSettings>) -> anyhow::Result<TelemetryGuard> {
    // The routing spans are for the exporter, not the log: without one
    // they are disabled at their call sites and cost nothing.
    let filter = || {
        let base =
            EnvFilter::try_from_env("PREFIX_ROUTER_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
        match format!("{SPANS}=off").parse() {
            Ok(off) => base.add_directive(off),
            Err(_) => base,
        }
    };
    let fmt = tracing_subscriber::fmt::layer();
    let Some(otlp) = otlp else {
        tracing_subscriber::registry()
            .with(fmt.with_filter(filter()))
            .try_init()
            .context("installing the logger")?;
        return Ok(TelemetryGuard { provider: None });
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/traces", otlp.endpoint.trim_end_matches('/')))
        .build()
        .context("building the OTLP span exporter")?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            otlp.sample_ratio.clamp(0.0, 1.0),
        ))))
        .with_resource(
            opentelemetry_sdk::Resource::builder_empty()
                .with_service_name(otlp.service_name.clone())
                .build(),
        )
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("prefix-router"))
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target(SPANS, tracing::Level::INFO),
        );
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter()))
        .with(spans)
        .try_init()
        .context("installing the logger")?;
    EXPORTING.store(true, Ordering::Relaxed);
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}

/// The span of one routing decision, a child of the client's trace context
/// in `headers` when spans are exported; `model` and `worker` are recorded
/// once known.
pub fn route_span(headers: &HeaderMap) -> tracing::Span {
    let span = tracing::info_span!(
        target: SPANS,
        "route",
        otel.kind = "server",
        model = tracing::field::Empty,
        worker = tracing::field::Empty,
    );
    continue_trace(&span, headers);
    span
}

/// Makes `span` a child of the client's trace context in `headers`, when
/// spans are exported.
fn continue_trace(span: &tracing::Span, headers: &HeaderMap) {
    if !EXPORTING.load(Ordering::Relaxed) {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let _ = span.set_parent(parent);
}

/// Sets `traceparent` (and `tracestate`) in `headers` to `span`, when spans
/// are exported: the worker's own spans then nest under the router's.
pub fn hand_on(span: &tracing::Span, headers: &mut HeaderMap) {
    if !EXPORTING.load(Ordering::Relaxed) {
        return;
    }
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeaderInjector(headers));
}
