//! The client load generator: requests at a steady rate (open loop, a new
//! connection each, so that the balancer places every one), prompts that
//! share long prefixes (a few documents, Zipf-popular, each followed by a
//! new question), and a record of every request: its attempts, the worker
//! that served it and the cached tokens that worker reported.
//!
//! What the client does on a failure (see `docs/reliability.md`):
//!
//! * an error before the response's status line (connection refused,
//!   reset, closed): the request produced nothing; it is sent again, as an
//!   OpenAI SDK does (up to [`LoadConfig::max_attempts`], 50 ms apart);
//! * a non-streamed answer cut after its headers: the client has nothing
//!   usable either (the JSON is incomplete); sent again;
//! * a streamed answer cut after its first token: the client has shown
//!   part of an answer; **failed** (no transparent retry is possible);
//! * any HTTP status but 200: **failed**, not retried (stricter than the
//!   SDK, which retries 5xx);
//! * no complete answer within [`LoadConfig::attempt_timeout`]: **failed**.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::fleet::MODEL;
use crate::support::TOKEN;

mod attempt;
mod record;

pub use attempt::body;
use attempt::one;
pub use record::{Attempt, AttemptEnd, Record, counts, failures};

/// What to send.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Requests per second.
    pub rate: f64,
    /// Shared prefixes (documents).
    pub docs: usize,
    /// Lines per document (~12 tokens each).
    pub doc_lines: usize,
    /// Zipf exponent of the documents' popularity (0: uniform).
    pub zipf: f64,
    /// Share of streamed requests.
    pub stream_share: f64,
    /// `max_tokens` of every request.
    pub max_tokens: u32,
    /// Ask `/admin/explain` before each request what the fleet believes.
    pub explain: bool,
    /// Attempts per request (see the module docs).
    pub max_attempts: u32,
    /// Longest an attempt may take.
    pub attempt_timeout: Duration,
    /// Seed of the choices.
    pub seed: u64,
    /// Documents are named `<doc_prefix>-<i>` (arms that must not share
    /// prefixes use different ones).
    pub doc_prefix: &'static str,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            rate: 25.0,
            docs: 8,
            doc_lines: 20,
            zipf: 0.8,
            stream_share: 0.0,
            max_tokens: 8,
            explain: false,
            max_attempts: 3,
            attempt_timeout: Duration::from_secs(30),
            seed: 1,
            doc_prefix: "doc",
        }
    }
}

/// Document `i` of a workload: distinct from its first token.
pub fn document(prefix: &str, i: usize, lines: usize) -> String {
    let mut p = format!("Document {prefix}-{i} of the reference set.\n");
    for l in 0..lines {
        p.push_str(&format!(
            "Line {l} of document {prefix}-{i}, repeated for length.\n"
        ));
    }
    p
}

/// A running load; [`Load::stop`] ends it and returns the records.
pub struct Load {
    stop: watch::Sender<bool>,
    task: JoinHandle<Vec<Record>>,
    sent: Arc<AtomicU64>,
}

impl Load {
    /// Starts sending to `target` (`http://host:port`) at once.
    pub fn start(target: String, cfg: LoadConfig, epoch: Instant) -> Load {
        let (stop, mut stop_rx) = watch::channel(false);
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        let task = tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .tcp_nodelay(true)
                .build()
                .expect("client");
            let docs: Arc<Vec<String>> = Arc::new(
                (0..cfg.docs)
                    .map(|i| document(cfg.doc_prefix, i, cfg.doc_lines))
                    .collect(),
            );
            let weights: Vec<f64> = (0..cfg.docs)
                .map(|i| 1.0 / ((i + 1) as f64).powf(cfg.zipf))
                .collect();
            let total: f64 = weights.iter().sum();
            let mut rng = StdRng::seed_from_u64(cfg.seed);
            let cfg = Arc::new(cfg);
            let target = Arc::new(target);
            let limit = Arc::new(Semaphore::new(256));
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / cfg.rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut running = JoinSet::new();
            let mut records = Vec::new();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop_rx.changed() => break,
                }
                let mut x = rng.random::<f64>() * total;
                let mut doc = 0;
                while doc + 1 < weights.len() && x >= weights[doc] {
                    x -= weights[doc];
                    doc += 1;
                }
                let streamed = rng.random::<f64>() < cfg.stream_share;
                let permit = limit.clone().acquire_owned().await.expect("semaphore");
                let (client, docs, cfg, target) =
                    (client.clone(), docs.clone(), cfg.clone(), target.clone());
                counter.fetch_add(1, Ordering::Relaxed);
                running.spawn(async move {
                    let _permit = permit;
                    one(&client, &target, &docs[doc], doc, streamed, &cfg, epoch).await
                });
                while let Some(r) = running.try_join_next() {
                    records.push(r.expect("request task"));
                }
            }
            while let Some(r) = running.join_next().await {
                records.push(r.expect("request task"));
            }
            records
        });
        Load { stop, task, sent }
    }

    /// Requests sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops sending, waits for the requests in flight, returns every
    /// record in the order sent.
    pub async fn stop(self) -> Vec<Record> {
        let _ = self.stop.send(true);
        let mut records = self.task.await.expect("load task");
        records.sort_by_key(|r| r.id);
        records
    }
}
