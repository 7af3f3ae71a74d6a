//! The routing step's helpers, shared by the state suite's `route` and the
//! router suite's `route_script` (which includes this file by path): chains
//! of block hashes, the default inputs, workers registered and requests
//! released as a router would.

use std::time::Duration;

use protocol::WorkerLoad;
use protocol::hashing::BlockHash;
use state::{InFlight, RouteOutcome, RouteParams, StateStore, StateTtls, WorkerHeartbeat};

use crate::support::M;

pub const BS: usize = 16;

pub fn chain(n: u64, salt: u64) -> Vec<BlockHash> {
    (0..n)
        .map(|i| BlockHash(salt.wrapping_mul(0x9e37_79b9) ^ (i + 1)))
        .collect()
}

/// The cache-aware policy's default inputs with bounded-load `epsilon`
/// (the router's `CacheAwareConfig::route_params` gives the same).
pub fn params(prompt_tokens: u64, epsilon: f64, seed: u32) -> RouteParams {
    RouteParams {
        epsilon,
        ..RouteParams::new(prompt_tokens, BS, seed)
    }
}

pub fn ttls() -> StateTtls {
    StateTtls {
        worker_lease: Duration::from_secs(120),
        router_lease: Duration::from_secs(120),
        ..StateTtls::default()
    }
}

pub async fn worker(s: &StateStore, id: &str, load: Option<WorkerLoad>) {
    let hb = WorkerHeartbeat {
        worker_id: id.into(),
        url: "http://127.0.0.1:9".into(),
        load,
    };
    s.heartbeat(M, &hb).await.unwrap();
}

/// Ends a routed request as its router would: the request and its prefill.
pub async fn release(s: &StateStore, o: &RouteOutcome) {
    let id = &o.lookup.workers[o.chosen.unwrap()].info.worker_id;
    let done = InFlight {
        requests: -1,
        prefill_tokens: -(o.prefill_tokens as i64),
    };
    s.change_in_flight(M, id, done).await.unwrap();
}
