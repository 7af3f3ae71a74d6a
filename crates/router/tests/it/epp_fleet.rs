//! The endpoint picker's test fleet: pickers sharing a real valkey-server
//! and three registered workers (nothing listens at their addresses: the
//! picker never connects to them), and reading their shared state.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use prefix_router::ext_proc::Metadata;
use prefix_router::{BodyMode, EppSettings, ServeArgs};
use serde_json::json;
use state::{StateStore, StateTtls, WorkerHeartbeat};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::envoy::{Envoy, destination, exchange_duplex};
use crate::support::{Router, Valkey, args, free_port, get, store, tokenizer_dir};

pub const MODEL: &str = "qwen3";

/// Pickers on one Valkey, and three registered workers.
pub struct Fleet {
    pub valkey: Valkey,
    pub pickers: Vec<(Router, SocketAddr)>,
    pub store: StateStore,
    pub endpoints: Vec<String>,
}

pub async fn fleet(body_mode: BodyMode) -> Fleet {
    fleet_with(body_mode, |_| {}).await
}

pub async fn fleet_with(body_mode: BodyMode, tune: impl Fn(&mut ServeArgs)) -> Fleet {
    fleet_tuned(2, body_mode, tune, |_| {}).await
}

/// `pickers` pickers with `tune`d flags and `tune_epp`ed picker settings;
/// waited for until ready unless their port speaks TLS (the test does).
pub async fn fleet_tuned(
    pickers: usize,
    body_mode: BodyMode,
    tune: impl Fn(&mut ServeArgs),
    tune_epp: impl Fn(&mut EppSettings),
) -> Fleet {
    let valkey = Valkey::start();
    // The workers first: the pickers' start (two tokenizers loaded) is the
    // heavy part, on 2 shared cores.
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let store = store(&valkey, "pr", "test-probe", ttls);
    let mut endpoints = Vec::new();
    for i in 0..3 {
        let endpoint = format!("127.0.0.{}:8000", i + 2);
        let hb = WorkerHeartbeat {
            worker_id: format!("w{i}"),
            url: format!("http://{endpoint}"),
            load: None,
        };
        store.heartbeat(MODEL, &hb).await.unwrap();
        endpoints.push(endpoint);
    }
    let count = pickers;
    let mut pickers = Vec::new();
    let mut plain = Vec::new();
    for _ in 0..count {
        let mut a = args();
        a.model = Some(MODEL.into());
        a.tokenizer_dir = Some(tokenizer_dir());
        // Locality only: these tests are about pickers agreeing, not about
        // spreading load.
        a.epsilon = Some(100.0);
        a.queue_cost_tokens = Some(0.0);
        tune(&mut a);
        let grpc: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
            .parse()
            .unwrap();
        let mut epp = EppSettings::new(grpc, body_mode);
        tune_epp(&mut epp);
        if epp.tls.is_none() {
            plain.push(grpc);
        }
        let router = Router::start_epp_with(&valkey.url(), a, epp).await;
        pickers.push((router, grpc));
    }
    for grpc in plain {
        wait_serving(grpc).await;
    }
    Fleet {
        valkey,
        pickers,
        store,
        endpoints,
    }
}

pub async fn wait_serving(grpc: SocketAddr) {
    for _ in 0..600 {
        if health(grpc, "readiness").await == Some(ServingStatus::Serving) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("picker on {grpc} never ready");
}

pub async fn health(grpc: SocketAddr, service: &str) -> Option<ServingStatus> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .ok()?
        .connect()
        .await
        .ok()?;
    health_over(channel, service).await
}

/// The gRPC health of `service` over `channel`.
pub async fn health_over(channel: Channel, service: &str) -> Option<ServingStatus> {
    let mut client = HealthClient::new(channel);
    let answer = client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .ok()?;
    ServingStatus::try_from(answer.into_inner().status).ok()
}

pub fn document(topic: &str) -> String {
    (0..40)
        .map(|i| format!("Paragraph {i} of the {topic} manual explains one more detail. "))
        .collect()
}

pub fn completion(prompt: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"model": MODEL, "prompt": prompt, "max_tokens": 4})).unwrap()
}

/// The destination of a full-duplex exchange of one request up to the pick
/// (`envoy::exchange_duplex`).
pub async fn pick_duplex(
    envoy: &mut Envoy,
    body: &[u8],
    config: bool,
    metadata: Option<Metadata>,
) -> Vec<String> {
    destination(&exchange_duplex(envoy, body, config, metadata).await)
}

pub async fn in_flight(f: &Fleet) -> HashMap<String, u64> {
    let (st, body) = get(&f.pickers[0].0, "/admin/workers").await;
    assert_eq!(st, 200, "{body}");
    body["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["worker_id"].as_str().unwrap().to_owned(),
                w["in_flight"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The prefill tokens counted on worker `id` (requests before their first
/// response byte), polled until `done` holds (or failing after 5 s).
pub async fn wait_prefill(f: &Fleet, id: &str, done: impl Fn(u64) -> bool) -> u64 {
    let mut last = 0;
    for _ in 0..100 {
        let (_, body) = get(&f.pickers[0].0, "/admin/workers").await;
        last = body["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["worker_id"] == id)
            .map_or(0, |w| w["prefill_tokens"].as_u64().unwrap());
        if done(last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("prefill tokens of {id}: {last}");
}

/// Waits until the in-flight counts are `expected` (decrements are sent
/// off the stream's task).
pub async fn wait_in_flight(f: &Fleet, expected: &[(&str, u64)]) {
    let want: HashMap<String, u64> = expected
        .iter()
        .map(|(w, n)| ((*w).to_owned(), *n))
        .collect();
    let mut last = HashMap::new();
    for _ in 0..100 {
        last = in_flight(f).await;
        if want
            .iter()
            .all(|(w, n)| last.get(w).copied().unwrap_or(0) == *n)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("in flight {last:?}, expected {want:?}");
}

pub fn worker_of(f: &Fleet, endpoint: &str) -> String {
    let i = f.endpoints.iter().position(|e| e == endpoint).unwrap();
    format!("w{i}")
}
