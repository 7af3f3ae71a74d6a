//! Router overhead: the same small request sent directly to one sim-worker
//! and through the balancer (balancer + router + forwarding), interleaved
//! one by one so that both see the same machine; the overhead is the
//! difference of their percentiles.

use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use crate::client::{Client, completion_body};
use crate::metrics::Percentiles;
use crate::workload::Api;

/// Latencies of the calibration phase, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Overhead {
    /// Pairs measured.
    pub pairs: usize,
    /// Directly to the sim.
    pub direct_ms: Percentiles,
    /// Through the balancer and a router.
    pub routed_ms: Percentiles,
}

impl Overhead {
    /// p50 through the fleet minus p50 direct.
    pub fn p50_ms(&self) -> f64 {
        self.routed_ms.p50 - self.direct_ms.p50
    }

    /// p99 through the fleet minus p99 direct.
    pub fn p99_ms(&self) -> f64 {
        self.routed_ms.p99 - self.direct_ms.p99
    }
}

/// Sends `pairs` small non-streamed completions (a few tokens, one output
/// token, shorter than one KV block so that they leave no cache behind) to
/// `direct` and to `routed`, alternating which goes first. `None` if a
/// side had no successful request.
pub async fn measure(
    direct: &Client,
    routed: &Client,
    model: &str,
    pairs: usize,
) -> Option<Overhead> {
    let mut d = Vec::with_capacity(pairs);
    let mut r = Vec::with_capacity(pairs);
    for i in 0..pairs {
        let body = completion_body(model, json!(format!("ping {i}")), 1, false);
        let order: [(&Client, &mut Vec<f64>); 2] = if i % 2 == 0 {
            [(direct, &mut d), (routed, &mut r)]
        } else {
            [(routed, &mut r), (direct, &mut d)]
        };
        for (client, out) in order {
            let o = client.send(Api::Completions, &body).await;
            if o.ok() {
                out.push(o.e2e.as_secs_f64() * 1e3);
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Some(Overhead {
        pairs,
        direct_ms: Percentiles::of(d)?,
        routed_ms: Percentiles::of(r)?,
    })
}
