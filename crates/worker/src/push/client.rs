//! [`FleetClient`]: one worker's calls to the fleet's internal API
//! (`/internal/*` on any router, or on an L4 balancer in front of them),
//! with the JSON bodies `src/api/internal.rs` takes.
//!
//! Every call carries `Authorization: Bearer <token>` when a token is set,
//! has a deadline, and is retried with backoff on transport errors, 5xx, 408
//! and 429 (never on other 4xx). Reports are idempotent (adding or removing
//! the same hashes twice changes nothing), so retrying them is safe. The one
//! exception is the final chunk of a chunked sync: if its commit went through
//! but the answer was lost, a retry would commit an empty staging set, so it
//! is retried only when the request surely never left (connect error).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::{Method, Url};

use super::call::Call;
use super::error::PushError;
use super::retry::Backoff;
use std::borrow::Cow;

use super::wire::wire_blocks;
use protocol::family::FamilyBlock;
use protocol::push::{
    EvictionBody, HeartbeatBody, HeartbeatReply, StoredBody, SyncBody, SyncReply,
};
use protocol::{Tier, WorkerLoad, WorkerRole};

/// The most hashes the fleet accepts in one `stored`/`eviction`/`events`
/// request.
pub const FLEET_MAX_BATCH: usize = 65_536;

/// Who a worker is to the fleet: the same on every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerIdentity {
    /// Stable id of the worker (its lease and entries are keyed by it).
    pub worker_id: String,
    /// The served model name (the fleet keeps one index per model).
    pub model: String,
    /// The base URL routers send requests to, e.g. `http://10.0.0.5:8000`.
    pub url: String,
    /// Its prefill/decode role, sent with each heartbeat; `None` sends none
    /// (a worker of both roles).
    pub role: Option<WorkerRole>,
}

/// How to reach the fleet.
#[derive(Debug, Clone)]
pub struct FleetClientConfig {
    /// Base URL of any router or of the balancer in front of them, e.g.
    /// `http://127.0.0.1:8080` (plain HTTP: the crate builds reqwest
    /// without TLS).
    pub base_url: String,
    /// The fleet's internal token (`PREFIX_ROUTER_INTERNAL_TOKEN`); `None`
    /// for a fleet run with `--allow-unauthenticated-internal`.
    pub token: Option<String>,
    /// Deadline of one request (connect included).
    pub timeout: Duration,
    /// Deadline of one sync chunk: the final one waits for the commit and
    /// the patch of the whole snapshot.
    pub sync_timeout: Duration,
    /// Deadline of establishing a connection.
    pub connect_timeout: Duration,
    /// Attempts per call (1 = no retry).
    pub attempts: u32,
    /// Delays between attempts.
    pub backoff: Backoff,
    /// Hashes per `stored`/`eviction`/`events` request; larger batches are
    /// split.
    pub max_batch: usize,
    /// Hashes per sync chunk; a larger snapshot goes as `sync_id` chunks.
    pub sync_chunk: usize,
}

impl FleetClientConfig {
    /// Defaults for `base_url`: 5 s per request (30 s per sync chunk), 1 s
    /// to connect, 3 attempts 50 ms → 500 ms apart, 8,192 hashes per batch,
    /// 32,768 per sync chunk.
    pub fn new(base_url: impl Into<String>, token: Option<String>) -> Self {
        FleetClientConfig {
            base_url: base_url.into(),
            token,
            timeout: Duration::from_secs(5),
            sync_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(1),
            attempts: 3,
            backoff: Backoff {
                initial: Duration::from_millis(50),
                max: Duration::from_millis(500),
            },
            max_batch: 8_192,
            sync_chunk: 32_768,
        }
    }
}

/// A worker's HTTP client to the fleet's internal API; cheap to clone.
#[derive(Debug, Clone)]
pub struct FleetClient {
    pub(super) http: reqwest::Client,
    pub(super) base: Url,
    pub(super) config: FleetClientConfig,
    /// When the fleet last answered that it has no `/internal/events`
    /// (`events`), shared by the clones.
    pub(super) events_refused: Arc<Mutex<Option<Instant>>>,
}

impl FleetClient {
    /// A client for `config.base_url`. Fails on a URL that is not plain
    /// `http://`.
    pub fn new(config: FleetClientConfig) -> Result<Self, PushError> {
        let invalid = |detail: &str| PushError::InvalidUrl {
            url: config.base_url.clone(),
            detail: detail.to_owned(),
        };
        let mut base = Url::parse(config.base_url.trim_end_matches('/'))
            .map_err(|e| invalid(&e.to_string()))?;
        if base.scheme() != "http" {
            return Err(invalid("only http:// is supported (no TLS in this build)"));
        }
        if base.cannot_be_a_base() || base.query().is_some() {
            return Err(invalid("must be a base URL without query"));
        }
        // Paths are appended as segments: drop a trailing empty one.
        if let Ok(mut segments) = base.path_segments_mut() {
            segments.pop_if_empty();
        }
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(PushError::Client)?;
        Ok(FleetClient {
            http,
            base,
            config,
            events_refused: Arc::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FleetClientConfig {
        &self.config
    }

    /// Registers the worker or renews its lease, with its load.
    /// `family_blocks`: the family depth this worker computes families with
    /// (a sharded fleet refuses another).
    pub async fn heartbeat(
        &self,
        who: &WorkerIdentity,
        load: Option<WorkerLoad>,
        family_blocks: Option<usize>,
    ) -> Result<HeartbeatReply, PushError> {
        let body = heartbeat_body(who, load, family_blocks);
        let reply = self.send(self.post("heartbeat", &body)).await?;
        serde_json::from_value(reply).map_err(|e| PushError::Reply {
            op: "heartbeat",
            url: self.url(&["internal", "heartbeat"]).to_string(),
            detail: e.to_string(),
        })
    }

    /// Confirms blocks the worker now caches, each on its best tier (one
    /// request per tier, split into `max_batch` requests; GPU ones without
    /// a `medium`, as before tiers). An empty list sends nothing.
    pub async fn stored(
        &self,
        who: &WorkerIdentity,
        blocks: &[FamilyBlock],
    ) -> Result<(), PushError> {
        for tier in Tier::ALL {
            let on: Vec<FamilyBlock> = blocks.iter().filter(|b| b.tier == tier).copied().collect();
            for chunk in on.chunks(self.batch()) {
                let (hashes, families) = wire_blocks(chunk);
                let body = StoredBody {
                    worker_id: who.worker_id.as_str().into(),
                    model: Some(who.model.as_str().into()),
                    block_hashes: Cow::Owned(hashes),
                    families,
                    medium: (tier != Tier::Gpu).then_some(tier),
                };
                self.send(self.post("stored", &body)).await?;
            }
        }
        Ok(())
    }

    /// Reports blocks the worker evicted (split into `max_batch` requests).
    /// An empty list sends nothing.
    pub async fn evicted(
        &self,
        who: &WorkerIdentity,
        blocks: &[FamilyBlock],
    ) -> Result<(), PushError> {
        for chunk in blocks.chunks(self.batch()) {
            let (hashes, families) = wire_blocks(chunk);
            let body = EvictionBody {
                worker_id: who.worker_id.as_str().into(),
                model: Some(who.model.as_str().into()),
                evicted_hashes: Cow::Owned(hashes),
                families,
            };
            self.send(self.post("eviction", &body)).await?;
        }
        Ok(())
    }

    /// Destructive sync: the worker's block set in the fleet becomes exactly
    /// `hashes`. Up to `sync_chunk` hashes go in one request; more go as
    /// chunks of one random `sync_id`, committed atomically by the last.
    pub async fn sync(
        &self,
        who: &WorkerIdentity,
        hashes: &[FamilyBlock],
    ) -> Result<SyncReport, PushError> {
        let size = self.config.sync_chunk.max(1);
        if hashes.len() <= size {
            // Without a sync_id the fleet stages under a fresh id of its own
            // on every attempt, so this is safe to retry.
            let active = self.sync_chunk(who, hashes, None, true).await?;
            return Ok(SyncReport { active, chunks: 1 });
        }
        let sync_id = format!("{:016x}", rand::random::<u64>());
        let chunks: Vec<&[FamilyBlock]> = hashes.chunks(size).collect();
        let mut active = 0;
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            active = self.sync_chunk(who, chunk, Some(&sync_id), last).await?;
        }
        Ok(SyncReport {
            active,
            chunks: chunks.len(),
        })
    }

    /// One request of a sync: a chunk of snapshot `sync_id` (or a whole
    /// snapshot without one). Returns the fleet's `active` count when `last`.
    pub async fn sync_chunk(
        &self,
        who: &WorkerIdentity,
        blocks: &[FamilyBlock],
        sync_id: Option<&str>,
        last: bool,
    ) -> Result<u64, PushError> {
        let (hashes, families) = wire_blocks(blocks);
        let body = SyncBody {
            worker_id: who.worker_id.as_str().into(),
            model: Some(who.model.as_str().into()),
            active_hashes: Cow::Owned(hashes),
            families,
            tiers: super::wire::wire_tiers(blocks),
            sync_id: sync_id.map(Cow::Borrowed),
            last,
        };
        let mut call = self.post("sync", &body);
        call.timeout = self.config.sync_timeout;
        call.only_unsent = last && sync_id.is_some();
        let url = call.url.to_string();
        let reply = self.send(call).await?;
        if !last {
            return Ok(0);
        }
        let detail = format!("no \"active\" count in {reply}");
        serde_json::from_value::<SyncReply>(reply)
            .ok()
            .and_then(|r| r.active)
            .ok_or(PushError::Reply {
                op: "sync",
                url,
                detail,
            })
    }

    /// Drains the worker: out of routing at once, its entries purged.
    pub async fn deregister(&self, who: &WorkerIdentity) -> Result<(), PushError> {
        let mut url = self.url(&["internal", "workers", &who.worker_id]);
        url.query_pairs_mut().append_pair("model", &who.model);
        let call: Call<'_, ()> = Call {
            op: "deregister",
            method: Method::DELETE,
            url,
            body: None,
            timeout: self.config.timeout,
            only_unsent: false,
        };
        self.send(call).await.map(|_| ())
    }

    /// Marks the worker draining (`POST /admin/workers/{id}/drain`): out of
    /// routing at every router, still serving; the routers move what still
    /// runs on it at `deadline` from now.
    pub async fn drain(&self, who: &WorkerIdentity, deadline: Duration) -> Result<(), PushError> {
        let mut url = self.url(&["admin", "workers", &who.worker_id, "drain"]);
        url.query_pairs_mut()
            .append_pair("model", &who.model)
            .append_pair("deadline", &format!("{}ms", deadline.as_millis()));
        let call: Call<'_, ()> = Call {
            op: "drain",
            method: Method::POST,
            url,
            body: None,
            timeout: self.config.timeout,
            only_unsent: false,
        };
        self.send(call).await.map(|_| ())
    }

    pub(super) fn batch(&self) -> usize {
        self.config.max_batch.clamp(1, FLEET_MAX_BATCH)
    }
}

/// A heartbeat's body: who the worker is, its load and family depth.
pub(super) fn heartbeat_body(
    who: &WorkerIdentity,
    load: Option<WorkerLoad>,
    family_blocks: Option<usize>,
) -> HeartbeatBody<'_> {
    HeartbeatBody {
        worker_id: who.worker_id.as_str().into(),
        url: who.url.as_str().into(),
        model: Some(who.model.as_str().into()),
        load,
        family_blocks,
        role: who.role,
    }
}

/// What a whole sync did, however many requests it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncReport {
    /// Blocks the fleet now holds for the worker (the snapshot plus live
    /// speculative claims of requests routed meanwhile).
    pub active: u64,
    /// Requests the snapshot took.
    pub chunks: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_built_from_segments_and_only_http_is_accepted() {
        let c =
            FleetClient::new(FleetClientConfig::new("http://127.0.0.1:8080/fleet/", None)).unwrap();
        assert_eq!(
            c.url(&["internal", "workers", "gpu 0/a"]).as_str(),
            "http://127.0.0.1:8080/fleet/internal/workers/gpu%200%2Fa"
        );
        for bad in ["https://x", "127.0.0.1:80", "http://x/?q=1", "mailto:a@b"] {
            assert!(
                FleetClient::new(FleetClientConfig::new(bad, None)).is_err(),
                "{bad}"
            );
        }
    }
}
