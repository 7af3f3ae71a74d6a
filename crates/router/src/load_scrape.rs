//! Worker load from the workers' own Prometheus gauges (optional,
//! `--scrape-metrics-interval`).
//!
//! Heartbeats and the ORCA response header already carry load, but only as
//! often as workers report or requests finish; scraping `GET /metrics`
//! keeps it fresh on a fixed period, also for workers without a reporter.
//! Every router scrapes every live worker: the shared state needs one
//! scraper, but electing one would add a moving part, and the interval
//! bounds the cost (routers × workers requests per interval).
//!
//! The page is parsed by `protocol::vllm_metrics` and fetched by
//! `worker::MetricsClient`, both shared with the reporter sidecar.

use std::time::Duration;

use futures_util::StreamExt;

use protocol::vllm_metrics::parse_vllm_gauges;
use state::{StateError, StateStore};
use worker::{MetricsClient, ScrapeError};

/// How often and how carefully workers are scraped.
#[derive(Debug, Clone)]
pub struct ScrapeSettings {
    /// Period of a scrape round.
    pub interval: Duration,
    /// Deadline of one worker's fetch, connection and body included.
    pub timeout: Duration,
    /// Largest `/metrics` body read.
    pub max_body_bytes: usize,
    /// Workers scraped at once.
    pub concurrency: usize,
}

impl ScrapeSettings {
    /// Rounds every `interval`, 500 ms and 4 MiB per worker, 16 at once.
    pub fn every(interval: Duration) -> Self {
        ScrapeSettings {
            interval,
            timeout: Duration::from_millis(500),
            max_body_bytes: 4 << 20,
            concurrency: 16,
        }
    }
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScrapeRound {
    /// Workers whose load was recorded.
    pub recorded: usize,
    /// Workers skipped (no answer, no gauges, store error).
    pub failed: usize,
}

/// Scrapes the fleet's workers and records their load.
#[derive(Clone)]
pub struct Scraper {
    store: StateStore,
    client: MetricsClient,
    concurrency: usize,
}

impl Scraper {
    /// A scraper over `store` with `settings`' bounds.
    pub fn new(store: StateStore, settings: &ScrapeSettings) -> Result<Self, ScrapeError> {
        Ok(Scraper {
            store,
            client: MetricsClient::new(settings.timeout, settings.max_body_bytes)?,
            concurrency: settings.concurrency.max(1),
        })
    }

    /// One round over every live worker of every model; a worker that fails
    /// is skipped (debug log, `prefix_router_scrape_failures_total`).
    pub async fn round(&self) -> ScrapeRound {
        let mut jobs = Vec::new();
        let models = match self.store.models().await {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "scrape round skipped: cannot list models");
                return ScrapeRound::default();
            }
        };
        for model in models {
            match self.store.workers(&model).await {
                Ok(workers) => jobs.extend(
                    workers
                        .into_iter()
                        .filter(|w| w.status == "live")
                        .map(|w| (model.clone(), w.info.worker_id, w.info.url)),
                ),
                Err(e) => tracing::debug!(error = %e, model, "scrape skipped: cannot list workers"),
            }
        }
        let outcomes: Vec<bool> = futures_util::stream::iter(jobs)
            .map(|(model, worker, url)| async move {
                match self.scrape(&model, &worker, &url).await {
                    Ok(()) => {
                        metrics::counter!("prefix_router_scrapes_total").increment(1);
                        true
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, model, worker, url, "worker metrics not scraped; skipped");
                        metrics::counter!("prefix_router_scrape_failures_total", "reason" => e.reason())
                            .increment(1);
                        false
                    }
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let recorded = outcomes.iter().filter(|ok| **ok).count();
        ScrapeRound {
            recorded,
            failed: outcomes.len() - recorded,
        }
    }

    /// Scrapes one worker and records what it reports for `model`.
    async fn scrape(&self, model: &str, worker: &str, url: &str) -> Result<(), ScrapeFailure> {
        let text = self.client.fetch(url).await?;
        let gauges = parse_vllm_gauges(&text, Some(model));
        let (waiting, running, kv) = (gauges.waiting(), gauges.running(), gauges.kv_usage());
        if waiting.is_none() && kv.is_none() {
            // Recording nothing would still mark the old load as fresh.
            return Err(ScrapeError::NoGauges.into());
        }
        // False only when the lease ended meanwhile: nothing to record then.
        self.store
            .report_load(model, worker, waiting, running, kv)
            .await?;
        Ok(())
    }
}

/// Why one worker's load was not recorded (the worker is skipped).
#[derive(Debug, thiserror::Error)]
enum ScrapeFailure {
    /// Its page could not be read, or held no load.
    #[error(transparent)]
    Fetch(#[from] ScrapeError),
    /// The load could not be stored.
    #[error("storing the load: {0}")]
    State(#[from] StateError),
}

impl ScrapeFailure {
    /// The `reason` label of `prefix_router_scrape_failures_total`.
    fn reason(&self) -> &'static str {
        match self {
            ScrapeFailure::Fetch(e) => e.reason(),
            ScrapeFailure::State(_) => "state",
        }
    }
}

/// Runs a [`Scraper`] round every `settings.interval` until `stop` turns
/// true (or its sender goes away). A round that overruns the interval
/// delays the next one rather than stacking rounds.
pub async fn scrape_loop(
    store: StateStore,
    settings: ScrapeSettings,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let scraper = match Scraper::new(store, &settings) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "metrics scraping disabled: cannot build its HTTP client");
            return;
        }
    };
    tracing::info!(interval = ?settings.interval, "scraping the workers' /metrics");
    let scraper = &scraper;
    crate::periodic::every(settings.interval, stop, || async move {
        let round = scraper.round().await;
        tracing::trace!(?round, "scrape round");
    })
    .await;
}
