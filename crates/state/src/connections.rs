//! Two lanes to Valkey: one multiplexed connection for routing calls and a
//! pool for bulk work, both with deadlines and transparent reconnection.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Pool, Runtime};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{Mutex, RwLock};

use super::StateError;

/// Where Valkey is and how long to wait for it.
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    /// `redis://`, `rediss://`, `valkey://` or `valkeys://` URL; user,
    /// password, database and TLS come from the URL.
    pub url: String,
    /// Deadline of one routing-lane call.
    pub hot_timeout: Duration,
    /// Deadline of one bulk-lane call.
    pub bulk_timeout: Duration,
    /// Connections in the bulk pool.
    pub pool_size: usize,
}

impl ConnectionSettings {
    /// Defaults for `url`: 20 ms routing deadline (then the router falls
    /// back rather than keep the client waiting), 5 s bulk, 8 pooled.
    pub fn new(url: &str) -> Self {
        ConnectionSettings {
            url: url.to_owned(),
            hot_timeout: Duration::from_millis(20),
            bulk_timeout: Duration::from_secs(5),
            pool_size: 8,
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

pub(super) struct Connections {
    client: redis::Client,
    hot: RwLock<Option<ConnectionManager>>,
    connecting: Arc<Mutex<()>>,
    bulk: Pool,
    settings: ConnectionSettings,
}

impl Connections {
    pub(super) fn new(settings: ConnectionSettings) -> Result<Self, StateError> {
        let url = normalize_url(&settings.url)?;
        let invalid = |e: &dyn std::fmt::Display| StateError::Invalid {
            what: "valkey url",
            detail: e.to_string(),
        };
        let client = redis::Client::open(url.as_str()).map_err(|e| invalid(&e))?;
        // Explicit timeouts: redis-rs' own defaults (500 ms) would undercut
        // the bulk deadline under load.
        let conn_config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(settings.bulk_timeout))
            .set_connection_timeout(Some(settings.bulk_timeout));
        let manager = deadpool_redis::Manager::new_with_config(url.as_str(), conn_config)
            .map_err(|e| invalid(&e))?;
        let bulk = Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .wait_timeout(Some(settings.bulk_timeout))
            .create_timeout(Some(settings.bulk_timeout))
            .recycle_timeout(Some(settings.bulk_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| invalid(&e))?;
        Ok(Connections {
            client,
            hot: RwLock::new(None),
            connecting: Arc::new(Mutex::new(())),
            bulk,
            settings,
        })
    }

    /// The routing connection. Establishing it is not bounded by the routing
    /// deadline (a TLS handshake to a remote Valkey may take longer): a
    /// background attempt connects, and a caller waits for it only as long
    /// as its deadline, then gets `Unavailable` (and routes by fallback).
    async fn hot_connection(self: &Arc<Self>) -> Result<ConnectionManager, StateError> {
        if let Some(c) = self.hot.read().await.as_ref() {
            return Ok(c.clone());
        }
        if let Ok(guard) = self.connecting.clone().try_lock_owned() {
            let this = self.clone();
            tokio::spawn(async move {
                let _guard = guard;
                if let Err(e) = this.connect_hot().await {
                    tracing::warn!(error = %e, "routing lane cannot reach valkey yet");
                }
            });
        }
        // The attempt holds the lock until it is done.
        let _ = tokio::time::timeout(self.settings.hot_timeout, self.connecting.lock()).await;
        self.hot
            .read()
            .await
            .clone()
            .ok_or_else(|| StateError::Unavailable("routing lane connecting".into()))
    }

    /// Connects the routing lane, waiting up to the bulk deadline.
    pub(super) async fn connect_hot(&self) -> Result<(), StateError> {
        if self.hot.read().await.is_some() {
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
        *self.hot.write().await = Some(manager);
        Ok(())
    }

    /// Runs `f` on the routing connection within the routing deadline.
    pub(super) async fn with_hot<T, F, Fut>(self: &Arc<Self>, f: F) -> Result<T, StateError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
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
        F: FnOnce(deadpool_redis::Connection) -> Fut,
        Fut: Future<Output = Result<T, StateError>>,
    {
        let t = self.settings.bulk_timeout;
        tokio::time::timeout(t, async {
            let conn = self
                .bulk
                .get()
                .await
                .map_err(|e| StateError::Unavailable(format!("bulk pool: {e}")))?;
            f(conn).await
        })
        .await
        .map_err(|_| StateError::Timeout(t))?
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
mod tests {
    use super::*;

    #[test]
    fn valkey_schemes_are_aliases() {
        assert_eq!(normalize_url("valkey://h:1/0").unwrap(), "redis://h:1/0");
        assert_eq!(
            normalize_url("valkeys://u:p@h:1").unwrap(),
            "rediss://u:p@h:1"
        );
        assert_eq!(normalize_url("redis://h:1").unwrap(), "redis://h:1");
        assert!(normalize_url("http://h:1").is_err());
        assert!(normalize_url("h:1").is_err());
    }
}
