//! [`MetricsClient`]: `GET <worker>/metrics`, bounded in time and size, so
//! that a slow or misbehaving worker costs a scrape round at most one
//! timeout and a few MiB.

use std::time::Duration;

/// Why an engine's `/metrics` page gave no load.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// No full answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connecting, sending or reading failed.
    #[error("request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The worker answered with a status other than 200.
    #[error("HTTP status {0}")]
    Status(u16),
    /// The body was larger than the cap.
    #[error("body over {0} bytes")]
    TooLarge(usize),
    /// The page holds neither the queue nor the KV usage gauge.
    #[error("no vLLM load gauge (vllm:num_requests_waiting, vllm:kv_cache_usage_perc)")]
    NoGauges,
}

impl ScrapeError {
    /// The `reason` label of `prefix_router_scrape_failures_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            ScrapeError::Timeout(_) => "timeout",
            ScrapeError::Http(_) => "http",
            ScrapeError::Status(_) => "status",
            ScrapeError::TooLarge(_) => "too_large",
            ScrapeError::NoGauges => "no_gauges",
        }
    }
}

/// An HTTP client for workers' `/metrics` pages.
#[derive(Clone)]
pub struct MetricsClient {
    client: reqwest::Client,
    timeout: Duration,
    max_bytes: usize,
}

impl MetricsClient {
    /// A client whose fetches give up after `timeout` (connecting and
    /// reading the whole body) or past `max_bytes` of body.
    pub fn new(timeout: Duration, max_bytes: usize) -> Result<Self, ScrapeError> {
        let client = reqwest::Client::builder()
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(2)
            .build()?;
        Ok(MetricsClient {
            client,
            timeout,
            max_bytes,
        })
    }

    /// The text of `<base_url>/metrics`.
    pub async fn fetch(&self, base_url: &str) -> Result<String, ScrapeError> {
        let url = format!("{}/metrics", base_url.trim_end_matches('/'));
        tokio::time::timeout(self.timeout, self.fetch_unbounded(&url))
            .await
            .map_err(|_| ScrapeError::Timeout(self.timeout))?
    }

    async fn fetch_unbounded(&self, url: &str) -> Result<String, ScrapeError> {
        // The classic text format, which every Prometheus client can write.
        let mut resp = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "text/plain; version=0.0.4")
            .send()
            .await?;
        if resp.status() != reqwest::StatusCode::OK {
            return Err(ScrapeError::Status(resp.status().as_u16()));
        }
        if resp
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(ScrapeError::TooLarge(self.max_bytes));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(ScrapeError::TooLarge(self.max_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(String::from_utf8(body)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}
