//! The optional response cache: identical deterministic requests answered
//! from Valkey, replayed byte for byte (SSE chunks included) without
//! reaching a worker. Off unless `--response-cache-ttl` is set.
//!
//! * `key`: which requests are eligible (temperature 0 or a seed, one
//!   choice) and their key (path, model, tenant, `cache_salt`, canonical
//!   body).
//! * `entry`: what an entry holds, its bytes, its replay.
//! * `recorder`: a miss's response, kept as it streams to the client and
//!   stored once it has ended.
//!
//! Valkey (`state`'s `response_get`/`response_put`, the budget in
//! `response_put.lua`) holds the entries, so every router of the fleet
//! shares them. Any Valkey trouble makes a lookup a plain miss, never an
//! error for the client.

mod entry;
mod key;
mod recorder;

pub use key::{Ineligible, RequestKey, request_key};

use crate::config::ResponseCacheSettings;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use tokio::sync::Semaphore;

use state::{ResponsePut, StateStore};

use entry::CachedResponse;

use recorder::{Pending, Recording};

/// The response header that tells a cache hit (`hit`) from an eligible
/// request that was not one (`miss`); absent when the cache was not asked.
pub use protocol::headers::CACHE_HEADER;

/// Outcomes of `prefix_router_response_cache_total`: of a lookup (`hit`,
/// `miss`, `skipped`: not eligible, `error`: Valkey failed) and of a store
/// (`stored`, `exists`, `full`, `too_large`, `not_stored`: not a complete
/// 200 response, `error`).
pub const OUTCOMES: [&str; 9] = [
    "hit",
    "miss",
    "skipped",
    "error",
    "stored",
    "exists",
    "full",
    "too_large",
    "not_stored",
];

/// Stores running at once; more responses are not stored.
const MAX_PENDING_STORES: usize = 64;

/// The response cache of one router.
#[derive(Clone)]
pub struct ResponseCache {
    inner: Arc<Inner>,
}

struct Inner {
    store: StateStore,
    settings: ResponseCacheSettings,
    /// Deadline of a lookup.
    lookup_timeout: Duration,
    stores: Arc<Semaphore>,
    /// Bytes kept by responses being recorded, over all requests: at most
    /// `settings.max_bytes`, so concurrent misses cannot hold unbounded memory.
    recording: AtomicUsize,
}

/// What a lookup found.
pub enum Lookup {
    /// The replayed response.
    Hit(Response),
    /// Not cached: route the request, and pass its response to
    /// [`ResponseCache::record`].
    Miss(Miss),
    /// Route the request as if there were no cache, storing nothing: it
    /// is not eligible, or Valkey failed or was too slow.
    Bypass,
}

/// An eligible request that was not in the cache.
pub struct Miss {
    key: RequestKey,
}

impl ResponseCache {
    /// A cache in `store`. A lookup waits for Valkey as long as a routing
    /// call does (`valkey_timeout`), but at least 100 ms: an entry may be
    /// larger than a routing reply.
    pub fn new(
        store: StateStore,
        settings: ResponseCacheSettings,
        valkey_timeout: Duration,
    ) -> Self {
        let lookup_timeout = valkey_timeout.max(Duration::from_millis(100));
        for outcome in OUTCOMES {
            metrics::counter!("prefix_router_response_cache_total", "outcome" => outcome)
                .absolute(0);
        }
        ResponseCache {
            inner: Arc::new(Inner {
                store,
                settings,
                lookup_timeout,
                stores: Arc::new(Semaphore::new(MAX_PENDING_STORES)),
                recording: AtomicUsize::new(0),
            }),
        }
    }

    /// Counts a request the cache may not answer.
    pub fn skipped(&self, why: Ineligible) {
        tracing::trace!(%why, "response cache skipped");
        count("skipped");
    }

    /// Looks `key` up; any failure is [`Lookup::Bypass`].
    pub async fn lookup(&self, key: RequestKey) -> Lookup {
        let store = &self.inner.store;
        let found = tokio::time::timeout(
            self.inner.lookup_timeout,
            store.response_get(&key.model, &key.hex),
        )
        .await;
        match found {
            Ok(Ok(Some(bytes))) => match CachedResponse::decode(Bytes::from(bytes)) {
                Ok(entry) => {
                    count("hit");
                    Lookup::Hit(entry.into_response())
                }
                Err(e) => {
                    tracing::warn!(error = %e, model = %key.model, "response cache entry unreadable; routed");
                    count("error");
                    Lookup::Miss(Miss { key })
                }
            },
            Ok(Ok(None)) => {
                count("miss");
                Lookup::Miss(Miss { key })
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "response cache lookup failed; routed");
                count("error");
                Lookup::Bypass
            }
            Err(_) => {
                tracing::debug!("response cache lookup timed out; routed");
                count("error");
                Lookup::Bypass
            }
        }
    }

    /// The worker's response to a miss, passed on unchanged (marked
    /// `miss`) and stored once it has ended, when it is a complete 200
    /// response without a content encoding.
    pub fn record(&self, miss: Miss, mut resp: Response) -> Response {
        resp.headers_mut()
            .insert(CACHE_HEADER, HeaderValue::from_static("miss"));
        let identity = resp
            .headers()
            .get(header::CONTENT_ENCODING)
            .is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"));
        if resp.status() != StatusCode::OK || !identity {
            count("not_stored");
            return resp;
        }
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let pending = Pending {
            cache: self.inner.clone(),
            key: miss.key,
            status: resp.status().as_u16(),
            content_type,
            chunks: Vec::new(),
            size: 0,
            too_large: false,
            held: 0,
            length: resp
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
        };
        resp.map(|body| Body::from_stream(Recording::new(body.into_data_stream(), pending)))
    }
}

impl Inner {
    /// Stores `entry` off the request path (at most [`MAX_PENDING_STORES`]
    /// at once).
    fn spawn_store(this: &Arc<Inner>, key: RequestKey, entry: Vec<u8>) {
        let Ok(permit) = this.stores.clone().try_acquire_owned() else {
            count("not_stored");
            return;
        };
        let inner = this.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let s = &inner.settings;
            let put = inner
                .store
                .response_put(&key.model, &key.hex, &entry, s.ttl, s.max_bytes)
                .await;
            match put {
                Ok(ResponsePut::Stored) => count("stored"),
                Ok(ResponsePut::Exists) => count("exists"),
                Ok(ResponsePut::Full) => count("full"),
                Err(e) => {
                    tracing::debug!(error = %e, "response cache store failed");
                    count("error");
                }
            }
        });
    }
}

fn count(outcome: &'static str) {
    metrics::counter!("prefix_router_response_cache_total", "outcome" => outcome).increment(1);
}
