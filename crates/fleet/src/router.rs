//! The `prefix-router` processes of a fleet: `serve` ([`RouterSpec`]) and
//! the `reporter` sidecar beside an engine ([`ReporterSpec`]), their flags
//! built in one place. The tests, the fault scenarios and the load test
//! start their routers and reporters from these.

use std::path::PathBuf;

use crate::process::ProcSpec;

/// `prefix-router serve --listen <listen> --valkey <valkey> <args>`, with
/// the internal token in `PREFIX_ROUTER_INTERNAL_TOKEN` and its log level
/// in `PREFIX_ROUTER_LOG`.
#[derive(Debug, Clone)]
pub struct RouterSpec {
    /// A short name for messages and the log file (`router-0`).
    pub name: String,
    /// The `prefix-router` binary.
    pub program: PathBuf,
    /// `host:port` to listen on.
    pub listen: String,
    /// The Valkey URL.
    pub valkey: String,
    /// The internal bearer token.
    pub token: String,
    /// `PREFIX_ROUTER_LOG`.
    pub log_level: String,
    /// More flags.
    pub args: Vec<String>,
    /// Extra environment variables (after the token and log level).
    pub env: Vec<(String, String)>,
    /// Where its output goes.
    pub log: PathBuf,
}

impl RouterSpec {
    /// A router listening on `listen` with `valkey`, log level `warn`.
    pub fn new(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        listen: impl Into<String>,
        valkey: &str,
        token: &str,
        log: PathBuf,
    ) -> Self {
        RouterSpec {
            name: name.into(),
            program: program.into(),
            listen: listen.into(),
            valkey: valkey.to_owned(),
            token: token.to_owned(),
            log_level: "warn".into(),
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

    /// Adds an environment variable (it may override the log level).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The process recipe: every flag above, in one place.
    pub fn proc_spec(&self) -> ProcSpec {
        let mut spec = ProcSpec::new(&self.name, &self.program, self.log.clone())
            .args(["serve", "--listen", &self.listen, "--valkey", &self.valkey])
            .args(self.args.iter().cloned())
            .env("PREFIX_ROUTER_INTERNAL_TOKEN", &self.token)
            .env("PREFIX_ROUTER_LOG", &self.log_level);
        spec.env.extend(self.env.iter().cloned());
        spec
    }
}

/// `prefix-router reporter` beside an engine: it reads the engine's vLLM
/// KV events from `kv_events` (as the engine binds them: `tcp://*:<port>`,
/// the reporter connects), asks `replay` for what it missed, scrapes
/// `engine_url` and reports to `fleet_url` as `worker` of `model`.
#[derive(Debug, Clone)]
pub struct ReporterSpec {
    /// A short name for messages and the log file.
    pub name: String,
    /// The `prefix-router` binary.
    pub program: PathBuf,
    /// `--kv-events`.
    pub kv_events: String,
    /// `--replay`.
    pub replay: String,
    /// `--engine-url`.
    pub engine_url: String,
    /// `--fleet-url`.
    pub fleet_url: String,
    /// The internal bearer token (`PREFIX_ROUTER_INTERNAL_TOKEN`).
    pub token: String,
    /// `--worker-id`.
    pub worker: String,
    /// `--model`.
    pub model: String,
    /// `PREFIX_ROUTER_LOG`.
    pub log_level: String,
    /// More flags.
    pub args: Vec<String>,
    /// Where its output goes.
    pub log: PathBuf,
}

impl ReporterSpec {
    /// Appends flags.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The process recipe: every flag above, in one place.
    pub fn proc_spec(&self) -> ProcSpec {
        ProcSpec::new(&self.name, &self.program, self.log.clone())
            .args(["reporter", "--kv-events", &self.kv_events])
            .args(["--replay", &self.replay])
            .args(["--engine-url", &self.engine_url])
            .args(["--fleet-url", &self.fleet_url])
            .args(["--worker-id", &self.worker, "--model", &self.model])
            .args(self.args.iter().cloned())
            .env("PREFIX_ROUTER_INTERNAL_TOKEN", &self.token)
            .env("PREFIX_ROUTER_LOG", &self.log_level)
    }
}
