//! Flow control's fleet-wide waiting room (`flow_dispatch.lua`,
//! `flow_leave.lua`) against a real server, several routers sharing it:
//! priority across routers, tenants' shares by weight, sheddable requests,
//! entries of a router whose lease ended. Also run against redis-server 7
//! (scripts/test.sh).

use crate::support;

use std::time::Duration;

use state::{
    Arrival, FlowArrival, InFlight, SaturationThresholds, StateStore, StateTtls, WorkerHeartbeat,
    flow_member,
};
use support::{Valkey, store};

mod fairness;
mod priority;

const MODEL: &str = "m";

fn limits(max_in_flight: u64) -> SaturationThresholds {
    SaturationThresholds {
        max_in_flight,
        waiting: None,
        kv_usage: None,
        prefill_tokens: None,
        stale_load: Duration::from_secs(10),
    }
}

fn ttls() -> StateTtls {
    StateTtls {
        worker_lease: Duration::from_secs(600),
        router_lease: Duration::from_secs(600),
        ..StateTtls::default()
    }
}

async fn router(v: &Valkey, id: &str) -> StateStore {
    let s = store(v, "pr", id, ttls());
    s.router_lease(MODEL, Duration::from_secs(600))
        .await
        .unwrap();
    s
}

async fn worker(s: &StateStore, id: &str) {
    let hb = WorkerHeartbeat {
        worker_id: id.into(),
        url: format!("http://127.0.0.1:1/{id}"),
        load: None,
    };
    s.heartbeat(MODEL, &hb).await.unwrap();
}

fn deadline() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (now + Duration::from_secs(60)).as_millis() as u64
}

/// Places a request; returns its member and where it went.
async fn arrive(
    s: &StateStore,
    t: &SaturationThresholds,
    seq: u64,
    priority: i32,
    tenant: &str,
    weight: f64,
) -> (String, Arrival) {
    let member = flow_member(s.router_id(), seq, deadline());
    let a = FlowArrival {
        member: &member,
        priority,
        tenant,
        weight,
        may_wait: priority >= 0,
    };
    let d = s
        .flow_dispatch(MODEL, t, Duration::from_secs(5), Some(&a))
        .await
        .unwrap();
    (member, d.arrival)
}
