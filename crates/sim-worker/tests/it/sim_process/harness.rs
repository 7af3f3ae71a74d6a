//! The `sim-worker` binary as a child process ([`fleet::SimSpec`]), and
//! what the tests ask it. `crates/system-tests` includes this file too.
#![allow(dead_code)] // each includer uses a part

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The model name every test serves.
pub const MODEL: &str = "qwen3";

/// The longest a test waits for anything to happen (machines are shared).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The longest a sim may take to start: it loads its tokenizer, and on 2
/// shared cores under load that alone can take several seconds per sim.
pub const START_PATIENCE: Duration = Duration::from_secs(60);

/// The real Qwen3 tokenizer of `../shared`.
pub fn tokenizer_dir() -> PathBuf {
    fleet::binaries::shared_tokenizer_dir()
}

/// The `sim-worker` binary of this test's profile (`target/<profile>/`,
/// beside `deps/`): `cargo test --workspace` builds it with the tests.
pub fn sim_worker_bin() -> PathBuf {
    fleet::binaries::workspace_binary("sim-worker").unwrap()
}

/// A sim of [`MODEL`] named `name`, with `extra` flags: the spec every
/// test starts from (its output discarded).
pub fn sim_spec(name: &str, extra: &[&str]) -> fleet::SimSpec {
    fleet::SimSpec::new(
        name,
        sim_worker_bin(),
        MODEL,
        tokenizer_dir(),
        PathBuf::from("/dev/null"),
    )
    .args(extra.iter().copied())
    .parallel_prefill()
}

/// A running `sim-worker`; SIGKILLed on drop.
pub struct Sim {
    inner: fleet::Sim,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The KV-event PUB endpoint, when publishing.
    pub kv: Option<String>,
    /// The KV-event replay endpoint, when enabled.
    pub kv_replay: Option<String>,
}

impl Sim {
    /// Starts `sim-worker --port 0 <extra>` and reads the addresses it
    /// prints.
    pub async fn start(extra: &[&str]) -> Sim {
        Sim::from_spec(sim_spec("sim", extra)).await
    }

    /// Starts `spec` and reads the addresses it prints.
    pub async fn from_spec(spec: fleet::SimSpec) -> Sim {
        let inner = spec
            .start(START_PATIENCE)
            .await
            .expect("sim-worker did not start");
        let base = inner.url.clone();
        let (kv, kv_replay) = match &inner.kv_events {
            Some(e) => (Some(e.publisher.clone()), Some(e.replay.clone())),
            None => (None, None),
        };
        Sim {
            inner,
            base,
            kv,
            kv_replay,
        }
    }

    /// A sim that reports its cache to the fleet at `fleet_url` itself, as
    /// `worker`, with the internal `token` and `extra` flags.
    pub async fn pushing(worker: &str, fleet_url: &str, token: &str, extra: &[&str]) -> Sim {
        let spec = sim_spec(worker, extra)
            .worker_id(worker)
            .pushing(fleet_url, token);
        Sim::from_spec(spec).await
    }

    /// A vLLM-like engine that pushes nothing: it publishes KV events and
    /// replays them on loopback ports `kv` and `replay` (0: any), for a
    /// reporter to read; `extra` flags on top.
    pub async fn engine(worker: &str, (kv, replay): (u16, u16), extra: &[&str]) -> Sim {
        let spec = sim_spec(worker, extra).worker_id(worker).kv_events(
            &format!("tcp://127.0.0.1:{kv}"),
            &format!("tcp://127.0.0.1:{replay}"),
        );
        Sim::from_spec(spec).await
    }

    /// `<base><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
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

    /// The hashes the sim caches now (hex).
    pub async fn cached(&self) -> BTreeSet<String> {
        hex_set(&self.state().await["cached_hashes"])
    }

    /// The hashes the sim caches now that the shared index holds (hex):
    /// anchors and the ends of stored runs (`protocol::index`).
    pub async fn indexed(&self) -> BTreeSet<String> {
        hex_set(&self.state().await["indexed_hashes"])
    }

    /// The hashes the sim holds on its CPU tier now (hex).
    pub async fn cpu_cached(&self) -> BTreeSet<String> {
        hex_set(&self.state().await["cpu_hashes"])
    }

    /// `POST /sim/faults`; returns the faults now in force.
    pub async fn faults(&self, body: Value) -> Value {
        let resp = reqwest::Client::new()
            .post(self.url("/sim/faults"))
            .json(&body)
            .send()
            .await
            .expect("faults");
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("faults JSON")
    }

    /// The exit status, waiting up to [`PATIENCE`] for it.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.inner.proc.exited() {
                return status;
            }
            assert!(Instant::now() < deadline, "sim-worker did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A JSON array of hex strings as a set.
pub fn hex_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|h| h.as_str().expect("hex").to_owned())
        .collect()
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

/// A completion request body.
pub fn completion(prompt: &str, max_tokens: usize, stream: bool) -> Value {
    json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream})
}

/// Polls `check` every 50 ms until it returns `Some`, for up to
/// [`PATIENCE`]; panics with `what` otherwise.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
