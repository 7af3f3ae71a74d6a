//! The coarse signal: every instance's chunk count, polled from the
//! controller's `GET /controller/key-stats` (not `/controller/workers`,
//! whose unfiltered list the controller caches for 30 s).

use std::sync::Arc;
use std::time::Duration;

use super::LmCache;
use super::reply::KeyStats;

/// The longest one poll may take.
const POLL_TIMEOUT: Duration = Duration::from_secs(2);

impl LmCache {
    /// Polls the key counts every `--lmcache-poll-interval` until `stop`.
    pub async fn poll_loop(self: Arc<Self>, stop: tokio::sync::watch::Receiver<bool>) {
        tracing::info!(
            controller = %protocol::redact_url(&self.settings.controller),
            interval = ?self.settings.poll_interval,
            "reading the LMCache controller"
        );
        let lm = &self;
        crate::periodic::every(self.settings.poll_interval, stop, || lm.poll_once()).await;
    }

    /// One poll: the counts replaced on success, kept (and the failure
    /// counted and logged, rate-limited) otherwise.
    pub async fn poll_once(&self) {
        let url = format!("{}/controller/key-stats", self.settings.controller);
        let ask = async {
            let resp = self.client.get(&url).send().await?.error_for_status()?;
            resp.json::<KeyStats>().await
        };
        let timeout = POLL_TIMEOUT.min(self.settings.poll_interval);
        let why = match tokio::time::timeout(timeout, ask).await {
            Ok(Ok(stats)) => {
                let counts = stats.per_worker(&self.settings);
                for (worker, n) in &counts {
                    metrics::gauge!("prefix_router_lmcache_keys", "worker" => worker.clone())
                        .set(*n as f64);
                }
                if let Ok(mut c) = self.counts.write() {
                    *c = Arc::new(counts);
                }
                metrics::counter!("prefix_router_lmcache_polls_total", "outcome" => "ok")
                    .increment(1);
                self.set_up(true);
                return;
            }
            Ok(Err(e)) => format!("key-stats poll failed: {e}"),
            Err(_) => format!("key-stats poll took more than {timeout:?}"),
        };
        metrics::counter!("prefix_router_lmcache_polls_total", "outcome" => "error").increment(1);
        self.set_up(false);
        self.warn_limited(&why);
    }
}
