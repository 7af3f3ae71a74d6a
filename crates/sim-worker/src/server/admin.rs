//! The simulation's controls, for tests and load-test harnesses: fault
//! switches flipped live (`/sim/faults`), vLLM's `reset_prefix_cache`, a
//! forced full resync, and the worker's whole state (`/sim/state`).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::app::App;
use super::config::StreamFault;
use super::error::{SimError, SimJson};
use protocol::WorkerRole;

/// The exit status of a simulated crash (what a shell shows for `kill -9`).
pub const CRASH_EXIT_CODE: i32 = 137;

/// `POST /sim/faults`: every field optional; absent ones are left as they
/// are.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsBody {
    /// Probability (0..=1) that an evicted hash goes unreported.
    drop_evictions: Option<f64>,
    /// Send no reports (push and KV events) while true.
    stop_reporting: Option<bool>,
    /// Probability (0..=1) that a KV-event batch is numbered and kept for
    /// replay but not sent, as when ZeroMQ drops it: a sequence gap.
    lose_kv_batches: Option<f64>,
    /// Answer nothing while true (`/sim/*` still answers).
    paused: Option<bool>,
    /// Exit at once with status 137, without answering.
    #[serde(default)]
    crash: bool,
    /// Break every answer after some tokens (`{"after_tokens": 3, "kind":
    /// "cut" | "error" | "crash"}`); `null` clears it.
    #[serde(default, deserialize_with = "some")]
    stream_fault: Option<Option<StreamFault>>,
}

/// A present field, `null` included, as `Some`.
fn some<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// `GET /sim/faults`: the faults in force.
pub async fn faults(State(app): State<Arc<App>>) -> Json<Value> {
    Json(current_faults(&app))
}

/// `POST /sim/faults`: flips fault switches live; answers the faults now in
/// force.
pub async fn set_faults(
    State(app): State<Arc<App>>,
    SimJson(body): SimJson<FaultsBody>,
) -> Result<Json<Value>, SimError> {
    if body.crash {
        tracing::warn!("simulated crash: exiting now");
        std::process::exit(CRASH_EXIT_CODE);
    }
    for (name, p) in [
        ("drop_evictions", body.drop_evictions),
        ("lose_kv_batches", body.lose_kv_batches),
    ] {
        if let Some(p) = p
            && !(0.0..=1.0).contains(&p)
        {
            return Err(SimError::bad_request(format!(
                "{name} must be within 0..=1, got {p}"
            )));
        }
    }
    {
        let mut st = app.core.lock();
        if let Some(p) = body.drop_evictions {
            st.reporters.set_drop_evictions(p);
        }
        if let Some(p) = body.lose_kv_batches {
            st.reporters.set_lose_kv_batches(p);
        }
        if let Some(stop) = body.stop_reporting {
            st.reporters.set_stopped(stop);
        }
    }
    if let Some(paused) = body.paused {
        app.core.set_paused(paused);
    }
    if let Some(fault) = body.stream_fault {
        app.core.set_stream_fault(fault);
    }
    let now = current_faults(&app);
    tracing::info!(faults = %now, "faults changed");
    Ok(Json(now))
}

fn current_faults(app: &App) -> Value {
    let st = app.core.lock();
    json!({
        "drop_evictions": st.reporters.drop_evictions(),
        "stop_reporting": st.reporters.stopped(),
        "lose_kv_batches": st.reporters.lose_kv_batches(),
        "paused": app.core.is_paused(),
        "stream_fault": app.core.stream_fault(),
    })
}

/// `POST /reset_prefix_cache` (vLLM's) and `POST /sim/reset_prefix_cache`:
/// forgets every cached block and reports `AllBlocksCleared`.
pub async fn reset_prefix_cache(State(app): State<Arc<App>>) -> StatusCode {
    let now = app.core.now();
    {
        let mut st = app.core.lock();
        st.engine.reset_prefix_cache(now);
        st.publish();
    }
    app.core.wake();
    StatusCode::OK
}

/// `POST /sim/resync`: sends a full snapshot to the fleet now.
pub async fn resync(State(app): State<Arc<App>>) -> Result<StatusCode, SimError> {
    match app.core.pusher() {
        Some(p) => {
            p.request_resync();
            Ok(StatusCode::ACCEPTED)
        }
        None => Err(SimError::new(
            StatusCode::CONFLICT,
            "invalid_request",
            "push reporting is off (no --fleet-url)",
        )),
    }
}

/// `GET /sim/state`: the cached hashes (sorted, hex; every tier's), gauges,
/// totals, faults and the reporters' state; a prefill or decode worker's
/// role and transfers, and the CPU tier's hashes and totals when it has one.
pub async fn state(State(app): State<Arc<App>>) -> Json<Value> {
    let faults = current_faults(&app);
    let st = app.core.lock_now();
    let cache = st.engine.cache();
    let stats = cache.stats();
    let gauges = st.engine.gauges();
    let counters = st.engine.counters();
    let kv = app.kv_endpoints.as_ref().map(|(endpoint, replay)| {
        let publisher = st.reporters.kv.as_ref();
        json!({
            "endpoint": endpoint,
            "replay_endpoint": replay,
            "published": publisher.map(|p| p.published()),
            "dropped": publisher.map(|p| p.dropped()),
        })
    });
    let mut state = json!({
        "worker_id": app.worker_id,
        "model": app.model,
        "now_ms": app.core.now().as_millis() as u64,
        "cached_hashes": cache.cached_hashes().iter().map(|h| h.to_hex()).collect::<Vec<_>>(),
        "indexed_hashes": cache.indexed_hashes().iter().map(|b| b.hash.to_hex()).collect::<Vec<_>>(),
        "cache": {
            "capacity": stats.capacity,
            "used_blocks": stats.used_blocks,
            "free_blocks": stats.free_blocks,
            "cached_blocks": stats.cached_blocks,
            "evictions": stats.evictions,
            "usage": stats.usage,
        },
        "gauges": {
            "num_requests_running": gauges.num_requests_running,
            "num_requests_waiting": gauges.num_requests_waiting,
            "kv_cache_usage_perc": gauges.kv_cache_usage_perc,
        },
        "counters": {
            "submitted": counters.submitted,
            "admitted": counters.admitted,
            "completed": counters.completed,
            "aborted": counters.aborted,
            "prompt_tokens": counters.prompt_tokens,
            "cached_tokens": counters.cached_tokens,
            "generation_tokens": st.stats.generation_tokens,
        },
        "faults": faults,
        "pusher": app.core.pusher().map(|p| p.status()),
        "kv_events": kv,
    });
    // Only where they exist: a `both` worker without a CPU tier answers
    // as it always did.
    if app.role != WorkerRole::Both {
        state["role"] = json!(app.role);
        state["counters"]["remote_prefills"] = json!(counters.remote_prefills);
        state["counters"]["remote_tokens"] = json!(counters.remote_tokens);
        state["counters"]["handoffs"] = json!(st.stats.handoffs);
    }
    if stats.cpu_capacity > 0 {
        state["cpu_hashes"] = json!(
            cache
                .cpu_hashes()
                .iter()
                .map(|h| h.to_hex())
                .collect::<Vec<_>>()
        );
        state["cpu_tier"] = json!({
            "capacity": stats.cpu_capacity,
            "cached_blocks": stats.cpu_cached_blocks,
            "offloaded": stats.offloaded,
            "evictions": stats.cpu_evictions,
            "hit_blocks": stats.cpu_hit_blocks,
            "hit_tokens": counters.cpu_hit_tokens,
        });
    }
    Json(state)
}
