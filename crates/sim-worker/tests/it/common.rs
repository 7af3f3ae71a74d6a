//! What the HTTP tests of the simulator share: a [`SimServer`] served
//! in-process on a loopback port, its KV events over real ZeroMQ, and the
//! bodies they send.
#![allow(dead_code)] // each test binary uses a part

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use protocol::WorkerRole;
use protocol::kv_events::{KvEvent, KvEventBatch};
use serde_json::{Value, json};
use sim_worker::PrefillSharing;
use sim_worker::server::{KvEventsSettings, SimConfig, SimServer};
use tokio::time::timeout;
use worker::kv_events::{KvEventSubscriber, KvEventSubscriberConfig};

/// The model every test serves.
pub const MODEL: &str = "qwen3";

/// The longest a test waits for anything (machines are shared).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A config for a sim of `role` with the real Qwen3 tokenizer of
/// `../shared`, publishing KV events on an ephemeral port, its prefills in
/// parallel (no queue between them: each test's timings are its own).
pub fn config(worker_id: &str, role: WorkerRole) -> SimConfig {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/tokenizers/qwen3"
    );
    let mut c = SimConfig::new(MODEL, dir);
    c.worker_id = worker_id.into();
    c.role = role;
    c.engine.prefill = PrefillSharing::Parallel;
    c.kv_events = Some(KvEventsSettings::new("tcp://127.0.0.1:0"));
    c
}

/// A running sim and its KV-event subscription.
pub struct Sim {
    pub server: SimServer,
    pub base: String,
    pub sub: KvEventSubscriber,
}

impl Sim {
    /// Starts `config` and subscribes to its KV events.
    pub async fn start(config: SimConfig) -> Sim {
        let server = SimServer::start(config, None).await.expect("sim starts");
        let base = format!("http://{}", server.addr());
        let endpoint = server.kv_endpoint().expect("kv endpoint").to_owned();
        let sub = KvEventSubscriber::start(KvEventSubscriberConfig::new(endpoint))
            .await
            .expect("subscriber");
        Sim { server, base, sub }
    }

    /// `<base><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POSTs `body` to `/v1/completions`.
    pub async fn complete(&self, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url("/v1/completions"))
            .json(body)
            .send()
            .await
            .expect("completion")
    }

    /// `GET /sim/state`.
    pub async fn state(&self) -> Value {
        reqwest::get(self.url("/sim/state"))
            .await
            .expect("state")
            .json()
            .await
            .expect("state JSON")
    }

    /// `GET /metrics`.
    pub async fn metrics(&self) -> String {
        reqwest::get(self.url("/metrics"))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// Sends warm-up prompts until the subscription receives a batch (a
    /// PUB socket drops what it sends before the subscription is in
    /// place), then drains what is left of them.
    pub async fn warm_up(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        for i in 0.. {
            assert!(Instant::now() < deadline, "no KV-event batch arrived");
            let resp = self
                .complete(&completion(&prompt(&format!("warm-up {i}"), 2), 1))
                .await;
            assert_eq!(resp.status(), 200);
            if timeout(Duration::from_millis(200), self.sub.recv())
                .await
                .is_ok()
            {
                break;
            }
        }
        while timeout(Duration::from_millis(200), self.sub.recv())
            .await
            .is_ok()
        {}
    }

    /// Receives batches until `done` says the events so far are enough.
    pub async fn events_until(&mut self, done: impl Fn(&[KvEvent]) -> bool) -> Vec<KvEvent> {
        let mut events = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        while !done(&events) {
            let left = deadline.saturating_duration_since(Instant::now());
            let batch: KvEventBatch = timeout(left, self.sub.recv())
                .await
                .expect("the expected events did not arrive")
                .expect("batch decodes")
                .batch;
            events.extend(batch.events);
        }
        events
    }
}

/// A prompt of about `lines` × 12 tokens, distinct per `topic`.
pub fn prompt(topic: &str, lines: usize) -> String {
    let mut p = format!("Document about {topic}.\n");
    for i in 0..lines {
        p.push_str(&format!(
            "Line {i} of the {topic} document, repeated for length.\n"
        ));
    }
    p
}

/// A non-streamed completion body.
pub fn completion(prompt: &str, max_tokens: usize) -> Value {
    json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": false})
}

/// Hex block hashes of a JSON array.
pub fn hex_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|h| h.as_str().expect("hex").to_owned())
        .collect()
}

/// The value of the sample `name{...}` of a Prometheus text, if present.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
