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
//! [`prometheus`] is the pure parser (shared with the reporter sidecar);
//! [`Scraper`] and [`scrape_loop`] do the I/O.

mod fetch;
pub mod prometheus;
mod scraper;

pub use fetch::{MetricsClient, ScrapeError};
pub use prometheus::{VllmGauges, parse_vllm_gauges, parse_vllm_load};
pub use scraper::{ScrapeRound, ScrapeSettings, Scraper, scrape_loop};
