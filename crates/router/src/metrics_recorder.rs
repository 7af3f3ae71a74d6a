//! The process's Prometheus recorder: installed once, its histograms drained
//! in the background, and the counters alerts rely on exported from zero.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

/// The process-wide Prometheus recorder (installed once, shared by servers
/// started in the same process, as tests do).
pub fn metrics_handle() -> anyhow::Result<PrometheusHandle> {
    // Built and installed inside one get_or_init: two servers starting at
    // once in one process must not end up rendering a recorder that is not
    // the global one (all their metrics would read empty).
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    let installed = HANDLE.get_or_init(|| {
        // Per-worker gauges of workers that left stop being exported.
        let recorder = PrometheusBuilder::new()
            .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE))
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder)
            .map_err(|e| format!("another metrics recorder is installed: {e}"))?;
        spawn_upkeep(handle.clone());
        Ok(handle)
    });
    installed.clone().map_err(|e| anyhow::anyhow!(e))
}

/// A gauge not set for this long is dropped from `/metrics`.
const GAUGE_IDLE: std::time::Duration = std::time::Duration::from_secs(120);

/// Exports at 0 the counters that alert rules take a rate of
/// (`deploy/prometheus/alerts.yml`), so that their series exist from the
/// first scrape, before the first event.
pub(crate) fn zero_counters() {
    for outcome in ["hit", "miss", "spill", "fallback", "no_worker"] {
        metrics::counter!("prefix_router_decisions_total", "outcome" => outcome).absolute(0);
    }
    // Admission: the dashboard's series exist before the first limit.
    metrics::counter!("prefix_router_tenant_tokens_total", "tenant" => "other").absolute(0);
    for name in [
        "prefix_router_admission_degraded_total",
        "prefix_router_fallback_routes_total",
        "prefix_router_upstream_retries_total",
        "prefix_router_forwarding_loops_total",
    ] {
        metrics::counter!(name).absolute(0);
    }
}

/// Histogram samples accumulate until upkeep drains them, which rendering
/// `/metrics` does: without a scraper, memory would grow with every request.
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawn = |h: PrometheusHandle| {
        std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(5));
                    h.run_upkeep();
                }
            })
    };
    if let Err(e) = spawn(handle) {
        tracing::warn!(error = %e, "metrics upkeep thread not started");
    }
}
