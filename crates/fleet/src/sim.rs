//! `sim-worker` processes: the flags every sim starts with, built in one
//! place ([`SimSpec`]), and a running sim with the addresses it printed
//! ([`Sim`]). The tests, the fault scenarios and the load test start their
//! sims here.

use std::path::PathBuf;
use std::time::Duration;

use crate::process::{ChildProc, ProcSpec};

/// A sim's vLLM KV-event sockets (ZMQ, as vLLM's `ZmqEventPublisher`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEndpoints {
    /// The PUB socket (`tcp://127.0.0.1:<port>`).
    pub publisher: String,
    /// The replay ROUTER socket.
    pub replay: String,
}

/// How to start one `sim-worker`: `--port 0` (unless `args` name a port),
/// `--model`, `--tokenizer-dir`, then `args`; `SIM_WORKER_LOG=warn`; an
/// internal token only when [`pushing`](SimSpec::pushing) gives one.
#[derive(Debug, Clone)]
pub struct SimSpec {
    /// A short name for messages and the log file (`sim-3`).
    pub name: String,
    /// The `sim-worker` binary.
    pub program: PathBuf,
    /// The model it serves.
    pub model: String,
    /// The tokenizer directory.
    pub tokenizer_dir: PathBuf,
    /// More flags.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Where its output goes.
    pub log: PathBuf,
}

impl SimSpec {
    /// A sim of `model` with the tokenizer of `tokenizer_dir`, logging to
    /// `log`.
    pub fn new(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        model: &str,
        tokenizer_dir: impl Into<PathBuf>,
        log: PathBuf,
    ) -> Self {
        SimSpec {
            name: name.into(),
            program: program.into(),
            model: model.to_owned(),
            tokenizer_dir: tokenizer_dir.into(),
            args: Vec::new(),
            env: Vec::new(),
            log,
        }
    }

    /// Appends flags.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Its worker id (`--worker-id`).
    pub fn worker_id(self, id: &str) -> Self {
        self.args(["--worker-id", id])
    }

    /// Reports its cache itself to the fleet at `fleet_url` with `token`
    /// (`--fleet-url`; the token through the environment).
    pub fn pushing(mut self, fleet_url: &str, token: &str) -> Self {
        self.env
            .push(("PREFIX_ROUTER_INTERNAL_TOKEN".into(), token.to_owned()));
        self.args(["--fleet-url", fleet_url])
    }

    /// Publishes vLLM KV events on `publisher` and serves their replay on
    /// `replay` (`tcp://127.0.0.1:0`: any port).
    pub fn kv_events(self, publisher: &str, replay: &str) -> Self {
        self.args([
            "--kv-events-endpoint",
            publisher,
            "--kv-events-replay-endpoint",
            replay,
        ])
    }

    /// Runs its prefills in parallel (`--prefill parallel`: no queue
    /// between prefills, so a test's timings do not depend on what else it
    /// sent), unless `--prefill` is already among its flags. Tests that
    /// want the engine's shared compute (the default) leave this out.
    pub fn parallel_prefill(self) -> Self {
        if self.has("--prefill") {
            self
        } else {
            self.args(["--prefill", "parallel"])
        }
    }

    fn has(&self, flag: &str) -> bool {
        self.args.iter().any(|a| a == flag)
    }

    /// The process recipe: every flag above, in one place.
    pub fn proc_spec(&self) -> ProcSpec {
        let port: &[&str] = if self.has("--port") {
            &[]
        } else {
            &["--port", "0"]
        };
        let mut spec = ProcSpec::new(&self.name, &self.program, self.log.clone())
            .args(port.iter().copied())
            .args(["--model", &self.model, "--tokenizer-dir"])
            .args([self.tokenizer_dir.display().to_string()])
            .args(self.args.iter().cloned())
            .env("SIM_WORKER_LOG", "warn")
            .unset("PREFIX_ROUTER_INTERNAL_TOKEN");
        spec.env.extend(self.env.iter().cloned());
        spec.pipe_stdout = true;
        spec
    }

    /// Starts it and waits up to `patience` for the addresses it prints
    /// (`listening on …`, and its KV-event sockets when it publishes them).
    pub async fn start(&self, patience: Duration) -> anyhow::Result<Sim> {
        let mut proc = self.proc_spec().spawn()?;
        let kv = self.has("--kv-events-endpoint");
        let replay = self.has("--kv-events-replay-endpoint");
        let mut prefixes = vec!["listening on "];
        if kv {
            prefixes.push("kv-events on ");
        }
        if replay {
            prefixes.push("kv-events replay on ");
        }
        let mut lines = proc.wait_lines(&prefixes, patience).await?.into_iter();
        let url = lines.next().unwrap_or_default();
        let publisher = if kv { lines.next() } else { None };
        let replay = if replay { lines.next() } else { None };
        let kv_events = match (publisher, replay) {
            (Some(publisher), Some(replay)) => Some(KvEndpoints { publisher, replay }),
            _ => None,
        };
        Ok(Sim {
            proc,
            url,
            kv_events,
        })
    }
}

/// A running `sim-worker`; SIGKILLed on drop.
#[derive(Debug)]
pub struct Sim {
    /// Its process.
    pub proc: ChildProc,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its KV-event sockets, when it publishes and replays them.
    pub kv_events: Option<KvEndpoints>,
}
