//! Two lanes to Valkey: one multiplexed connection for routing calls and a
//! few for bulk work (taken in turn), all with deadlines and transparent
//! reconnection.
//! Given several seed URLs, both lanes are Valkey Cluster connections
//! instead (each multiplexed, following slot moves and failovers).
//! A router serving on several threads (one runtime each) has both lanes
//! once per thread ([`crate::serving_thread`]): a connection's driver task
//! runs on the runtime that connected it, so a reply wakes only the thread
//! that waits for it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::{Mutex, OnceCell, RwLock};

use super::StateError;

/// Where Valkey is and how long to wait for it.
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    /// `redis://`, `rediss://`, `valkey://` or `valkeys://` URL; user,
    /// password, database and TLS come from the URL. Several URLs, comma
    /// separated, are the seeds of a Valkey Cluster.
    pub url: String,
    /// Deadline of one routing-lane call.
    pub hot_timeout: Duration,
    /// Deadline of one bulk-lane call.
    pub bulk_timeout: Duration,
    /// Multiplexed connections of the bulk lane (so that one large call,
    /// a sync's snapshot, does not hold up the others on its socket),
    /// shared out among the serving threads (at least one each).
    pub pool_size: usize,
    /// Serving threads, each with its own connections of both lanes.
    pub serving_threads: usize,
}

impl ConnectionSettings {
    /// Defaults for `url`: 20 ms routing deadline (then the router falls
    /// back rather than keep the client waiting), 5 s bulk, 8 bulk
    /// connections.
    pub fn new(url: &str) -> Self {
        ConnectionSettings {
            url: url.to_owned(),
            hot_timeout: Duration::from_millis(20),
            bulk_timeout: Duration::from_secs(5),
            pool_size: 8,
            serving_threads: 1,
        }
    }
}

/// Accepts the `valkey://` and `valkeys://` schemes as aliases of
/// `redis://` and `rediss://`; rejects anything else.
pub fn normalize_url(url: &str) -> Result<String, StateError> {
    let invalid = |detail: &str| StateError::Invalid {
        what: "valkey url",
        detail: detail.to_owned(),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("expected <scheme>://host:port"))?;
    let scheme = match scheme {
        "redis" | "valkey" => "redis",
        "rediss" | "valkeys" => "rediss",
        "unix" | "redis+unix" => scheme,
        _ => {
            return Err(invalid(
                "scheme must be redis, rediss, valkey, valkeys or unix",
            ));
        }
    };
    Ok(format!("{scheme}://{rest}"))
}

/// A connection of either lane, whichever kind of deployment.
pub(super) enum Conn {
    /// The routing lane to one server.
    Single(ConnectionManager),
    /// A bulk-lane connection to one server. It is not checked before use,
    /// so the first call after Valkey restarts finds it broken; that call
    /// is sent once more, on the reconnected connection. (Bulk scripts are
    /// idempotent; the in-flight gauges, which are not, are reconciled
    /// with each router's ledger at every lease renewal.)
    Bulk(ConnectionManager),
    /// Either lane to a cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Bulk(c) => Box::pin(async move {
                match c.req_packed_command(cmd).await {
                    Err(e) if e.is_connection_dropped() => c.req_packed_command(cmd).await,
                    other => other,
                }
            }),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Bulk(c) => Box::pin(async move {
                match c.req_packed_commands(cmd, offset, count).await {
                    Err(e) if e.is_connection_dropped() => {
                        c.req_packed_commands(cmd, offset, count).await
                    }
                    other => other,
                }
            }),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) | Conn::Bulk(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The seed URLs of a cluster, or None for one server.
fn cluster_seeds(url: &str) -> Result<Option<Vec<String>>, StateError> {
    if !url.contains(',') {
        return Ok(None);
    }
    let seeds = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(normalize_url)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(seeds))
}

/// The clients of both lanes to a cluster.
struct ClusterClients {
    hot: redis::cluster::ClusterClient,
    bulk: redis::cluster::ClusterClient,
}

/// One serving thread's connections of both lanes, connected lazily (from
/// that thread, so that their driver tasks run on its runtime).
struct Slot {
    hot: RwLock<Option<ConnectionManager>>,
    connecting: Arc<Mutex<()>>,
    /// The bulk lane to one server: multiplexed connections, connected
    /// when first taken and used in turn. (A checked-out pool, as before,
    /// cost a PING round trip per call.)
    bulk: Vec<OnceCell<ConnectionManager>>,
    next_bulk: AtomicUsize,
    cluster_hot: RwLock<Option<ClusterConnection>>,
    cluster_bulk: RwLock<Option<ClusterConnection>>,
}

impl Slot {
    fn new(bulk: usize) -> Self {
        Slot {
            hot: RwLock::new(None),
            connecting: Arc::new(Mutex::new(())),
            bulk: (0..bulk.max(1)).map(|_| OnceCell::new()).collect(),
            next_bulk: AtomicUsize::new(0),
            cluster_hot: RwLock::new(None),
            cluster_bulk: RwLock::new(None),
        }
    }
}

pub(super) struct Connections {
    client: redis::Client,
    cluster: Option<ClusterClients>,
    /// One per serving thread.
    slots: Vec<Slot>,
    settings: ConnectionSettings,
}

impl Connections {
    pub(super) fn new(settings: ConnectionSettings) -> Result<Self, StateError> {
        let invalid = |e: &dyn std::fmt::Display| StateError::Invalid {
            what: "valkey url",
            detail: e.to_string(),
        };
        let seeds = cluster_seeds(&settings.url)?;
        let cluster = match &seeds {
            None => None,
            Some(seeds) => {
                let client = |timeout: Duration| {
                    redis::cluster::ClusterClient::builder(seeds.iter().map(String::as_str))
                        .connection_timeout(settings.bulk_timeout)
                        .response_timeout(timeout)
                        .retries(2)
                        .build()
                        .map_err(|e| invalid(&e))
                };
                Some(ClusterClients {
                    hot: client(settings.hot_timeout)?,
                    bulk: client(settings.bulk_timeout)?,
                })
            }
        };
        // One server's lanes are built from the first seed either way (idle
        // in cluster mode: nothing connects them).
        let url = match &seeds {
            Some(seeds) => seeds.first().cloned().ok_or_else(|| invalid(&"no seed"))?,
            None => normalize_url(&settings.url)?,
        };
        let client = redis::Client::open(url.as_str()).map_err(|e| invalid(&e))?;
        let threads = settings.serving_threads.max(1);
        let bulk = settings.pool_size.div_ceil(threads);
        Ok(Connections {
            client,
            cluster,
            slots: (0..threads).map(|_| Slot::new(bulk)).collect(),
            settings,
        })
    }

    /// The current serving thread's connections.
    fn slot(&self) -> Result<&Slot, StateError> {
        crate::serving_slot(&self.slots)
            .ok_or_else(|| StateError::Unavailable("no connection slot".into()))
    }

    /// A cluster lane's connection, connecting it (within `wait`) if needed.
    async fn cluster_connection(
        slot: &RwLock<Option<ClusterConnection>>,
        client: &redis::cluster::ClusterClient,
        wait: Duration,
    ) -> Result<ClusterConnection, StateError> {
        if let Some(c) = slot.read().await.as_ref() {
            return Ok(c.clone());
        }
        let mut guard = slot.write().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let conn = tokio::time::timeout(wait, client.get_async_connection())
            .await
            .map_err(|_| StateError::Timeout(wait))?
            .map_err(|e| StateError::Unavailable(e.to_string()))?;
        tracing::info!("connected to the valkey cluster");
        *guard = Some(conn.clone());
        Ok(conn)
    }

    /// The routing connection. Establishing it is not bounded by the routing
    /// deadline (a TLS handshake to a remote Valkey may take longer): a
    /// background attempt connects, and a caller waits for it only as long
    /// as its deadline, then gets `Unavailable` (and routes by fallback).
    async fn hot_connection(self: &Arc<Self>) -> Result<Conn, StateError> {
        if let Some(c) = self.connected_hot().await {
            return Ok(c);
        }
        let connecting = self.slot()?.connecting.clone();
        if let Ok(guard) = connecting.clone().try_lock_owned() {
            let this = self.clone();
            tokio::spawn(async move {
                let _guard = guard;
                if let Err(e) = this.connect_hot().await {
                    tracing::warn!(error = %e, "routing lane cannot reach valkey yet");
                }
            });
        }
        // The attempt holds the lock until it is done.
        let _ = tokio::time::timeout(self.settings.hot_timeout, connecting.lock()).await;
        self.connected_hot()
            .await
            .ok_or_else(|| StateError::Unavailable("routing lane connecting".into()))
    }

    /// The routing connection, if it is established.
    async fn connected_hot(&self) -> Option<Conn> {
        let slot = self.slot().ok()?;
        match &self.cluster {
            Some(_) => slot.cluster_hot.read().await.clone().map(Conn::Cluster),
            None => slot.hot.read().await.clone().map(Conn::Single),
        }
    }

    /// Connects the routing lane, waiting up to the bulk deadline.
    pub(super) async fn connect_hot(&self) -> Result<(), StateError> {
        let slot = self.slot()?;
        if let Some(clients) = &self.cluster {
            let wait = self.settings.bulk_timeout;
            Self::cluster_connection(&slot.cluster_hot, &clients.hot, wait).await?;
            return Ok(());
        }
        if slot.hot.read().await.is_some() {
            return Ok(());
        }
        let t = self.settings.hot_timeout;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.settings.bulk_timeout))
            .set_response_timeout(Some(t))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let manager = tokio::time::timeout(
            self.settings.bulk_timeout,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await
        .map_err(|_| StateError::Timeout(self.settings.bulk_timeout))?
        .map_err(|e| StateError::Unavailable(e.to_string()))?;
        tracing::info!("connected routing lane to valkey");
        *slot.hot.write().await = Some(manager);
        Ok(())
    }

    /// The deadline of one routing-lane call.
    pub(super) fn hot_timeout(&self) -> Duration {
        self.settings.hot_timeout
    }

    /// Runs `f` on the routing connection within the routing deadline.
    pub(super) async fn with_hot<T, F, Fut>(self: &Arc<Self>, f: F) -> Result<T, StateError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Result<T, StateError>>,
    {
        let conn = self.hot_connection().await?;
        let t = self.settings.hot_timeout;
        tokio::time::timeout(t, f(conn))
            .await
            .map_err(|_| StateError::Timeout(t))?
    }

    /// Runs `f` on a pooled connection within the bulk deadline.
    pub(super) async fn with_bulk<T, F, Fut>(&self, f: F) -> Result<T, StateError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Result<T, StateError>>,
    {
        let t = self.settings.bulk_timeout;
        tokio::time::timeout(t, async {
            let conn = match &self.cluster {
                Some(clients) => Conn::Cluster(
                    Self::cluster_connection(&self.slot()?.cluster_bulk, &clients.bulk, t).await?,
                ),
                None => Conn::Bulk(self.bulk_connection().await?),
            };
            f(conn).await
        })
        .await
        .map_err(|_| StateError::Timeout(t))?
    }

    /// The next bulk connection to one server, connecting it if needed.
    async fn bulk_connection(&self) -> Result<ConnectionManager, StateError> {
        let slot = self.slot()?;
        let n = slot.next_bulk.fetch_add(1, Ordering::Relaxed) % slot.bulk.len();
        let cell = slot
            .bulk
            .get(n)
            .ok_or_else(|| StateError::Unavailable("no bulk connection".into()))?;
        // Explicit timeouts: redis-rs' own defaults (500 ms) would undercut
        // the bulk deadline under load.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.settings.bulk_timeout))
            .set_response_timeout(Some(self.settings.bulk_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        cell.get_or_try_init(|| async {
            ConnectionManager::new_with_config(self.client.clone(), config)
                .await
                .map_err(|e| StateError::Unavailable(format!("bulk lane: {e}")))
        })
        .await
        .cloned()
    }

    pub(super) async fn ping(self: &Arc<Self>) -> Result<(), StateError> {
        self.with_hot(|mut c| async move {
            redis::cmd("PING")
                .query_async::<String>(&mut c)
                .await
                .map(drop)
                .map_err(|e| StateError::from_redis("PING", e))
        })
        .await
    }
}

#[cfg(test)]
#[path = "connections_tests.rs"]
mod tests;
