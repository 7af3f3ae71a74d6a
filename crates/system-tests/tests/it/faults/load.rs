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

/// Request ids, unique in the test process (every prompt differs).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

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

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEnd {
    /// A complete 200 answer.
    Ok,
    /// Failed before the response's status line (retryable).
    NoResponse(String),
    /// Cut after the headers, before anything usable (retryable).
    CutBody(String),
    /// A stream cut after its first token (failed).
    CutStream(String),
    /// A status other than 200 (failed).
    Status(u16, String),
    /// No complete answer in time (failed).
    Timeout,
}

impl AttemptEnd {
    fn retryable(&self) -> bool {
        matches!(self, AttemptEnd::NoResponse(_) | AttemptEnd::CutBody(_))
    }
}

/// One attempt of a request; times in seconds since the fleet's epoch.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub start: f64,
    pub end: f64,
    pub result: AttemptEnd,
}

/// One request, as the client saw it.
#[derive(Debug, Clone)]
pub struct Record {
    pub id: u64,
    pub doc: usize,
    pub streamed: bool,
    /// When it was first sent (seconds since the epoch).
    pub sent: f64,
    pub attempts: Vec<Attempt>,
    /// A complete 200 answer in the end.
    pub ok: bool,
    /// `x-sim-worker` of the answer.
    pub worker: Option<String>,
    /// `x-prefix-router-worker` of the answer.
    pub routed: Option<String>,
    /// `x-sim-cached-tokens` of the answer.
    pub cached_tokens: Option<u64>,
    /// `/admin/explain` just before: matched blocks per worker.
    pub believed: Option<BTreeMap<String, u64>>,
    /// `/admin/explain`'s prompt tokens.
    pub prompt_tokens: Option<u64>,
}

impl Record {
    /// When its first attempt ended badly, if one did.
    pub fn failed_attempts(&self) -> impl Iterator<Item = &Attempt> {
        self.attempts.iter().filter(|a| a.result != AttemptEnd::Ok)
    }

    /// Blocks the fleet believed the serving worker held (explain mode).
    pub fn believed_blocks(&self) -> Option<u64> {
        let w = self.worker.as_ref()?;
        Some(self.believed.as_ref()?.get(w).copied().unwrap_or(0))
    }
}

/// Counts over a set of records.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub sent: usize,
    pub failed: usize,
    /// Requests that needed more than one attempt.
    pub retried: usize,
    /// Attempts that failed (retried or not).
    pub failed_attempts: usize,
    /// Σ cached tokens / Σ prompt tokens (when known).
    pub cached_share: f64,
}

pub fn counts(records: &[Record]) -> Counts {
    let ok = records.iter().filter(|r| r.ok).count();
    let (mut cached, mut prompt) = (0u64, 0u64);
    for r in records {
        if let (Some(c), Some(p)) = (r.cached_tokens, r.prompt_tokens) {
            cached += c;
            prompt += p;
        }
    }
    Counts {
        sent: records.len(),
        failed: records.len() - ok,
        retried: records.iter().filter(|r| r.attempts.len() > 1).count(),
        failed_attempts: records.iter().map(|r| r.failed_attempts().count()).sum(),
        cached_share: if prompt > 0 {
            cached as f64 / prompt as f64
        } else {
            0.0
        },
    }
}

/// A one-line description of every failed request and attempt.
pub fn failures(records: &[Record]) -> String {
    let mut out = String::new();
    for r in records {
        for a in r.failed_attempts() {
            out.push_str(&format!(
                "  request {} (document {}, {}, sent {:.2}s, {}): attempt {:.2}s..{:.2}s {:?}\n",
                r.id,
                r.doc,
                if r.streamed {
                    "streamed"
                } else {
                    "not streamed"
                },
                r.sent,
                if r.ok { "then ok" } else { "FAILED" },
                a.start,
                a.end,
                a.result
            ));
        }
    }
    out
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

/// A completion body for document `doc` and a new question.
pub fn body(doc: &str, id: u64, max_tokens: u32, stream: bool) -> Value {
    let prompt = format!("{doc}Question {id}: what does the document say?");
    let mut b =
        json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream});
    if stream {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
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

fn secs(epoch: Instant) -> f64 {
    epoch.elapsed().as_secs_f64()
}

async fn one(
    client: &reqwest::Client,
    target: &str,
    doc_text: &str,
    doc: usize,
    streamed: bool,
    cfg: &LoadConfig,
    epoch: Instant,
) -> Record {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let body = body(doc_text, id, cfg.max_tokens, streamed);
    let mut rec = Record {
        id,
        doc,
        streamed,
        sent: secs(epoch),
        attempts: Vec::new(),
        ok: false,
        worker: None,
        routed: None,
        cached_tokens: None,
        believed: None,
        prompt_tokens: None,
    };
    if cfg.explain {
        explain(client, target, &body, &mut rec).await;
    }
    for n in 0..cfg.max_attempts {
        if n > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let start = secs(epoch);
        let result = match tokio::time::timeout(
            cfg.attempt_timeout,
            attempt(client, target, &body, &mut rec),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => AttemptEnd::Timeout,
        };
        let retry = result.retryable();
        rec.ok = result == AttemptEnd::Ok;
        rec.attempts.push(Attempt {
            start,
            end: secs(epoch),
            result,
        });
        if !retry {
            break;
        }
    }
    rec
}

async fn explain(client: &reqwest::Client, target: &str, body: &Value, rec: &mut Record) {
    let Ok(resp) = client
        .post(format!("{target}/admin/explain"))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
    else {
        return;
    };
    let Ok(v) = resp.json::<Value>().await else {
        return;
    };
    rec.prompt_tokens = v["prompt_tokens"].as_u64();
    if let Some(rows) = v["candidates"].as_array() {
        rec.believed = Some(
            rows.iter()
                .filter_map(|c| {
                    Some((
                        c["worker_id"].as_str()?.to_owned(),
                        c["matched_blocks"].as_u64()?,
                    ))
                })
                .collect(),
        );
    }
}

async fn attempt(
    client: &reqwest::Client,
    target: &str,
    body: &Value,
    rec: &mut Record,
) -> AttemptEnd {
    let resp = match client
        .post(format!("{target}/v1/completions"))
        .json(body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return AttemptEnd::NoResponse(error_chain(&e)),
    };
    let status = resp.status().as_u16();
    if status != 200 {
        let text = resp.text().await.unwrap_or_default();
        return AttemptEnd::Status(status, text.chars().take(200).collect());
    }
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (worker, routed, cached) = (
        header("x-sim-worker"),
        header("x-prefix-router-worker"),
        header("x-sim-cached-tokens").and_then(|c| c.parse().ok()),
    );
    let streamed = body["stream"] == true;
    let mut usage_prompt = None;
    if !streamed {
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return AttemptEnd::CutBody(error_chain(&e)),
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => usage_prompt = v["usage"]["prompt_tokens"].as_u64(),
            Err(e) => return AttemptEnd::CutBody(format!("incomplete JSON: {e}")),
        }
    } else {
        let mut stream = resp.bytes_stream();
        let mut text = String::new();
        let mut tokens = false;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => {
                    text.push_str(&String::from_utf8_lossy(&b));
                    tokens |= text.contains("\"text\"");
                }
                Err(e) if tokens => return AttemptEnd::CutStream(error_chain(&e)),
                Err(e) => return AttemptEnd::CutBody(error_chain(&e)),
            }
        }
        if !text.contains("data: [DONE]") {
            let why = "stream ended without [DONE]".to_owned();
            return if tokens {
                AttemptEnd::CutStream(why)
            } else {
                AttemptEnd::CutBody(why)
            };
        }
        for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            if let Ok(v) = serde_json::from_str::<Value>(line)
                && let Some(p) = v["usage"]["prompt_tokens"].as_u64()
            {
                usage_prompt = Some(p);
            }
        }
    }
    rec.worker = worker;
    rec.routed = routed;
    rec.cached_tokens = cached;
    if rec.prompt_tokens.is_none() {
        rec.prompt_tokens = usage_prompt;
    }
    AttemptEnd::Ok
}

/// An error and its sources, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
