//! A `prefix-router serve` child process on an ephemeral port; SIGKILLed
//! on drop, like a crash.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{TOKEN, free_port, http};

/// A running router process.
pub struct RouterProcess {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl RouterProcess {
    /// Starts `prefix-router serve` on `valkey_url` with `extra` flags and
    /// waits until it answers `/health`.
    pub async fn start(valkey_url: &str, extra: &[&str]) -> RouterProcess {
        Self::start_with(valkey_url, extra, &[("PREFIX_ROUTER_LOG", "warn")], None).await
    }

    /// As [`RouterProcess::start`], with `env` set on top of the token (it
    /// may override `PREFIX_ROUTER_LOG`, unset otherwise) and the process's
    /// stdout and stderr appended to `log` when given (else discarded).
    pub async fn start_with(
        valkey_url: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> RouterProcess {
        // The port is probed free, then bound by the child: another process
        // may take it in between, and then the child exits; try another.
        for _ in 0..5 {
            let port = free_port();
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
        let output = |log: Option<&Path>| match log {
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Stdio::from)
                .expect("open the log file"),
            None => Stdio::null(),
        };
        let child = Command::new(super::router_bin())
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--valkey",
                valkey_url,
            ])
            .args(extra)
            .env("PREFIX_ROUTER_INTERNAL_TOKEN", TOKEN)
            .envs(env.iter().copied())
            .stdout(output(log))
            .stderr(output(log))
            .spawn()
            .expect("spawn prefix-router");
        let mut r = RouterProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let deadline = std::time::Instant::now() + patience;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = r.child.try_wait() {
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
    pub fn terminate(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..200 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
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
}

impl RouterProcess {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.base
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port of the base URL")
    }

    /// SIGKILL, like a crash, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
