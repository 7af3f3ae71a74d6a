//! A `prefix-router serve` child process on an ephemeral port; SIGKILLed
//! on drop, like a crash.

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
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_prefix-router"))
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--valkey",
                valkey_url,
            ])
            .args(extra)
            .env("PREFIX_ROUTER_INTERNAL_TOKEN", TOKEN)
            .env("PREFIX_ROUTER_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn prefix-router");
        let r = RouterProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        for _ in 0..200 {
            if http()
                .get(format!("{}/health", r.base))
                .send()
                .await
                .is_ok()
            {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("router did not come up");
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

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
