//! A `prefix-router serve` child process ([`fleet::RouterSpec`]) on an
//! ephemeral port; SIGKILLed on drop, like a crash.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{TOKEN, free_port, http, router_bin};

/// A running router process.
pub struct RouterProcess {
    child: fleet::ChildProc,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl RouterProcess {
    /// Starts `prefix-router serve` on `valkey_url` with `extra` flags and
    /// waits until it answers `/health`.
    pub async fn start(valkey_url: &str, extra: &[&str]) -> RouterProcess {
        Self::start_with(valkey_url, extra, &[], None).await
    }

    /// As [`RouterProcess::start`], with `env` set on top of the token and
    /// the log level `warn` (it may override `PREFIX_ROUTER_LOG`) and the
    /// process's stdout and stderr appended to `log` when given (else
    /// discarded).
    pub async fn start_with(
        valkey_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> RouterProcess {
        // The port is probed free, then bound by the child: another process
        // may take it in between, and then the child exits; try another.
        for _ in 0..5 {
            let port = free_port().unwrap();
            let patience = Duration::from_secs(10);
            if let Some(r) = Self::try_start_on(port, valkey_url, extra, env, log, patience).await {
                return r;
            }
        }
        panic!("router did not come up on any of 5 ports");
    }

    /// As [`RouterProcess::start_with`], on `127.0.0.1:port` (a router
    /// restarted where a balancer expects it), waiting up to `patience`
    /// for it to answer `/health`.
    pub async fn start_on(
        port: u16,
        valkey_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
        patience: Duration,
    ) -> RouterProcess {
        Self::try_start_on(port, valkey_url, extra, env, log, patience)
            .await
            .expect("router exited before it answered /health")
    }

    /// As [`RouterProcess::start_on`]; `None` when the child exits before it
    /// answers (e.g. its port was taken).
    async fn try_start_on(
        port: u16,
        valkey_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
        patience: Duration,
    ) -> Option<RouterProcess> {
        let log = log.map_or_else(|| PathBuf::from("/dev/null"), Path::to_owned);
        let mut spec = fleet::RouterSpec::new(
            format!("router-{port}"),
            router_bin(),
            format!("127.0.0.1:{port}"),
            valkey_url,
            TOKEN,
            log,
        )
        .args(extra.iter().copied());
        for (k, v) in env {
            spec = spec.env(k, v);
        }
        let child = spec.proc_spec().spawn().expect("spawn prefix-router");
        let mut r = RouterProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        // Up once it answers `/health` at all (a 503 included: e.g. still
        // without workers); gone if it exits first.
        let deadline = std::time::Instant::now() + patience;
        while std::time::Instant::now() < deadline {
            if r.child.exited().is_some() {
                return None;
            }
            if http()
                .get(format!("{}/health", r.base))
                .send()
                .await
                .is_ok()
            {
                return Some(r);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("router did not come up");
    }

    /// SIGTERM, as an orchestrator stops it, then waits for its exit (at
    /// most 10 s, then SIGKILL): its last log lines are written by then.
    /// How it exited (`None`: not yet reaped after the SIGKILL).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        self.child.terminate(Duration::from_secs(10));
        self.child.exited()
    }

    /// POSTs JSON with the internal token; returns (status, JSON or Null).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = http()
            .post(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .expect("request");
        (
            resp.status().as_u16(),
            resp.json().await.unwrap_or(Value::Null),
        )
    }

    /// GETs `path` with the internal token; returns the body text.
    pub async fn get(&self, path: &str) -> String {
        let resp = http()
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("request");
        resp.text().await.expect("body")
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.base
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port of the base URL")
    }

    /// SIGKILL, like a crash, and reaps it (waiting at most 5 s).
    pub fn kill(&mut self) {
        self.child.kill_now();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.child.exited().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
