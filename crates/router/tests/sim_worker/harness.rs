//! The `sim-worker` binary as a child process, and what the tests ask it.

use std::collections::BTreeSet;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::sim_process::spawn_sim_worker;
pub use crate::support::tokenizer_dir;

/// The model name every test serves.
pub const MODEL: &str = "qwen3";

/// The longest a test waits for anything to happen (machines are shared).
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A running `sim-worker`; SIGKILLed on drop.
pub struct Sim {
    child: Child,
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
    pub fn start(extra: &[&str]) -> Sim {
        let args: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        let (child, rx) = spawn_sim_worker(MODEL, &args, Stdio::inherit());
        let wants_kv = extra.contains(&"--kv-events-endpoint");
        let wants_replay = extra.contains(&"--kv-events-replay-endpoint");
        let (mut base, mut kv, mut kv_replay) = (None, None, None);
        let deadline = Instant::now() + PATIENCE;
        while base.is_none() || (wants_kv && kv.is_none()) || (wants_replay && kv_replay.is_none())
        {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).expect("sim-worker did not start");
            if let Some(a) = line.strip_prefix("listening on ") {
                base = Some(a.to_owned());
            } else if let Some(e) = line.strip_prefix("kv-events replay on ") {
                kv_replay = Some(e.to_owned());
            } else if let Some(e) = line.strip_prefix("kv-events on ") {
                kv = Some(e.to_owned());
            }
        }
        Sim {
            child,
            base: base.expect("address"),
            kv,
            kv_replay,
        }
    }

    /// A sim that reports its cache to the fleet at `fleet_url` itself, as
    /// `worker`, with `extra` flags.
    #[allow(dead_code)] // not every test binary starts one
    pub fn pushing(worker: &str, fleet_url: &str, extra: &[&str]) -> Sim {
        let mut flags = vec![
            "--worker-id",
            worker,
            "--fleet-url",
            fleet_url,
            "--internal-token",
            crate::support::TOKEN,
        ];
        flags.extend_from_slice(extra);
        Sim::start(&flags)
    }

    /// A vLLM-like engine that pushes nothing: it publishes KV events and
    /// replays them on loopback ports `kv` and `replay` (0: any), for a
    /// reporter to read; `extra` flags on top.
    #[allow(dead_code)] // not every test binary starts one
    pub fn engine(worker: &str, (kv, replay): (u16, u16), extra: &[&str]) -> Sim {
        let (kv, replay) = (
            format!("tcp://127.0.0.1:{kv}"),
            format!("tcp://127.0.0.1:{replay}"),
        );
        let mut flags = vec![
            "--worker-id",
            worker,
            "--kv-events-endpoint",
            &kv,
            "--kv-events-replay-endpoint",
            &replay,
        ];
        flags.extend_from_slice(extra);
        Sim::start(&flags)
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
    #[allow(dead_code)] // not every test binary has a CPU tier
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
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "sim-worker did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
