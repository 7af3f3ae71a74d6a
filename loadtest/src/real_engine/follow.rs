//! Does the index follow the engine? After `POST /reset_prefix_cache`
//! (the engine sends AllBlocksCleared) and after an engine restart (the
//! reporter reconnects, replays and resyncs), the router must stop
//! matching blocks the engine no longer has.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::cases::Case;
use super::exactness::{Row, Verdict, check, explain};
use super::topology::{TOKEN, Topology};

/// The outcome of one follow check.
#[derive(Debug, Clone, Serialize)]
pub struct Followed {
    /// What was done to the engine.
    pub event: String,
    /// The engine it was done to.
    pub engine: String,
    /// Tokens of the probe prompt the router matched on it before.
    pub matched_before: u64,
    /// Seconds from the event (the engine answering again, for a restart)
    /// until the router matched nothing on it; `None` if it never did.
    pub cleared_after_s: Option<f64>,
    /// The probe sent again afterwards.
    pub after: Row,
}

impl Followed {
    /// Whether the index followed and the probe agreed afterwards.
    pub fn ok(&self) -> bool {
        self.matched_before > 0
            && self.cleared_after_s.is_some()
            && self.after.verdict == Verdict::Exact
    }
}

/// Sends `case` through router 0, waits for its engine's report, and
/// returns that engine's index and the tokens of `case` matched on it.
async fn sent_to(t: &Topology, case: &Case) -> anyhow::Result<(usize, u64)> {
    let http = reqwest::Client::new();
    let bs = u64::from(t.settings().block_size);
    let routers = t.router_urls();
    check(&http, &routers, 0, TOKEN, bs, case, 1).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let e = explain(&http, &routers[0], TOKEN, &case.body).await?;
    let (name, matched) = e
        .matched
        .iter()
        .max_by_key(|(_, m)| **m)
        .map(|(n, m)| (n.clone(), *m))
        .unwrap_or_default();
    let i = t.engines.iter().position(|e| e.name == name).unwrap_or(0);
    Ok((i, matched))
}

/// The probe sent again after the event, through router 1.
async fn again(t: &Topology, case: &Case) -> anyhow::Result<Row> {
    let http = reqwest::Client::new();
    let bs = u64::from(t.settings().block_size);
    check(&http, &t.router_urls(), 1, TOKEN, bs, case, 2).await
}

/// Polls explain until the router matches nothing of `case` on engine `i`.
async fn until_cleared(t: &Topology, case: &Case, i: usize, limit: Duration) -> Option<f64> {
    let http = reqwest::Client::new();
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(e) = explain(&http, &t.router_urls()[0], TOKEN, &case.body).await
            && e.matched.get(&t.engines[i].name).copied().unwrap_or(0) == 0
        {
            return Some(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Sends `case`, then resets the prefix cache of the engine that served it.
pub async fn after_reset(t: &Topology, case: &Case) -> anyhow::Result<Followed> {
    let (i, matched_before) = sent_to(t, case).await?;
    t.reset_prefix_cache(i).await?;
    // vLLM queues AllBlocksCleared and publishes it with its next step:
    // an idle engine needs a request (any) to send it.
    t.nudge_engine(i).await?;
    let cleared_after_s = until_cleared(t, case, i, Duration::from_secs(15)).await;
    let after = again(t, case).await?;
    Ok(Followed {
        event: "POST /reset_prefix_cache".into(),
        engine: t.engines[i].name.clone(),
        matched_before,
        cleared_after_s,
        after,
    })
}

/// Sends `case`, then restarts the engine that served it.
pub async fn after_restart(t: &mut Topology, case: &Case) -> anyhow::Result<Followed> {
    let (i, matched_before) = sent_to(t, case).await?;
    eprintln!("real-engine: restarting {}", t.engines[i].name);
    t.restart_engine(i).await?;
    let cleared_after_s = until_cleared(t, case, i, Duration::from_secs(60)).await;
    // The restarted engine is registered again before it is asked.
    t.wait_registered().await?;
    let after = again(t, case).await?;
    Ok(Followed {
        event: "engine restart".into(),
        engine: t.engines[i].name.clone(),
        matched_before,
        cleared_after_s,
        after,
    })
}
