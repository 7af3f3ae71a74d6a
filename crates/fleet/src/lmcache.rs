//! [`LmcacheController`]: a real LMCache controller (`python -m
//! lmcache.v1.api_server`) from the venv `scripts/lmcache-test.sh` builds,
//! on free loopback ports, with the stand-ins of `scripts/lmcache/stubs`
//! for the torch and transformers it only imports (see docs/lmcache.md).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::binaries::workspace_root;
use crate::ports::free_port;
use crate::process::{ChildProc, ProcSpec, wait_http_ok};

/// The venv named by `LMCACHE_VENV`, or `target/lmcache-venv`, when it
/// holds a Python.
pub fn lmcache_venv(explicit: Option<&Path>) -> Option<PathBuf> {
    let venv = match explicit {
        Some(v) => v.to_owned(),
        None => std::env::var_os("LMCACHE_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/lmcache-venv")),
    };
    venv.join("bin/python").exists().then_some(venv)
}

/// `python` of `venv` with the controller's stand-ins on its path.
pub fn lmcache_python(venv: &Path, name: &str, log: PathBuf) -> ProcSpec {
    let stubs = workspace_root().join("scripts/lmcache/stubs");
    ProcSpec::new(name, venv.join("bin/python"), log)
        .env("PYTHONPATH", &stubs.to_string_lossy())
        .env("LMCACHE_TRACK_USAGE", "false")
}

/// A running controller, stopped on drop.
#[derive(Debug)]
pub struct LmcacheController {
    /// Its process.
    pub proc: ChildProc,
    /// `http://127.0.0.1:<port>`: what `--lmcache-controller` of a router takes.
    pub url: String,
    /// Its `--monitor-ports`.
    pub pull_port: u16,
    /// The registration port.
    pub reply_port: u16,
    /// The heartbeat port.
    pub heartbeat_port: u16,
}

impl LmcacheController {
    /// Starts the controller of `venv`, logging to `log`, and waits until
    /// it answers `GET /controller/key-stats`.
    pub async fn start(venv: &Path, log: PathBuf) -> anyhow::Result<Self> {
        let (http, pull, reply, heartbeat) =
            (free_port()?, free_port()?, free_port()?, free_port()?);
        let monitor = format!(r#"{{"pull":{pull},"reply":{reply},"heartbeat":{heartbeat}}}"#);
        let mut proc = lmcache_python(venv, "lmcache-controller", log)
            .args([
                "-m".to_owned(),
                "lmcache.v1.api_server".into(),
                "--host".into(),
                "127.0.0.1".into(),
                "--port".into(),
                http.to_string(),
                "--monitor-ports".into(),
                monitor,
            ])
            .spawn()?;
        let url = format!("http://127.0.0.1:{http}");
        let client = reqwest::Client::new();
        let ready = format!("{url}/controller/key-stats");
        wait_http_ok(&client, &ready, Duration::from_secs(60), Some(&mut proc)).await?;
        Ok(LmcacheController {
            proc,
            url,
            pull_port: pull,
            reply_port: reply,
            heartbeat_port: heartbeat,
        })
    }

    /// What a sim-worker's `--lmcache-controller` takes:
    /// `127.0.0.1:PULL:REPLY:HEARTBEAT`.
    pub fn sim_flag(&self) -> String {
        format!(
            "127.0.0.1:{}:{}:{}",
            self.pull_port, self.reply_port, self.heartbeat_port
        )
    }
}
