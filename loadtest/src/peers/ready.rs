//! Waiting for a peer replica to be ready: its `GET /readiness` (see the
//! module docs of `peers` for why not `/health`).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::{BIND_HOST, READY_PATH};

/// Waits until the replica on `127.0.0.1:port` is ready to route: its
/// `GET /readiness` answers 200 with at least one healthy worker and every
/// registered worker healthy. Fails after `timeout`.
///
/// `sglang-router` registers its workers one by one in the background after
/// it starts serving, so this can pass while only some are registered; use
/// [`wait_ready_workers`] with the number of sims to wait for all of them.
/// (`vllm-router` does not listen at all until at least one worker answers
/// `GET /health`.)
pub async fn wait_ready(port: u16, timeout: Duration) -> anyhow::Result<()> {
    wait_ready_workers(port, 1, timeout).await
}

/// Like [`wait_ready`], but waits for at least `expected` healthy workers
/// (pass the number of sim-workers given to [`command`]).
pub async fn wait_ready_workers(
    port: u16,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let url = format!("http://{BIND_HOST}:{port}{READY_PATH}");
    let http = reqwest::Client::new();
    loop {
        let last = match readiness(&http, &url).await {
            Ok((200, body)) => {
                let count = |key: &str| body.get(key).and_then(serde_json::Value::as_u64);
                match (count("healthy_workers"), count("total_workers")) {
                    (Some(h), Some(t)) if h >= expected.max(1) as u64 && h == t => return Ok(()),
                    _ => format!("200 {body}"),
                }
            }
            Ok((status, body)) => format!("{status} {body}"),
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() >= deadline {
            bail!(
                "peer router on {BIND_HOST}:{port} not ready ({expected} healthy workers) \
                 within {timeout:?}; last {READY_PATH}: {last}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Status and JSON body (`null` if not JSON) of `GET url`.
async fn readiness(http: &reqwest::Client, url: &str) -> anyhow::Result<(u16, serde_json::Value)> {
    let resp = http
        .get(url)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status().as_u16();
    let text = resp
        .text()
        .await
        .with_context(|| format!("reading {url}"))?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    ))
}
