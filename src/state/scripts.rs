//! [`ScriptSet`]: the Lua scripts of `lua/`, loaded once and called by SHA.

use std::time::Instant;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, FromRedisValue, ServerErrorKind};

use super::StateError;

const PRELUDE: &str = include_str!("../../lua/lib.lua");

/// One script of `lua/`. Each is the shared prelude followed by its own body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptName {
    /// Register a worker or renew its lease.
    Heartbeat,
    /// Stop routing to a worker and queue its entries for purge.
    Deregister,
    /// Speculative insert on routing.
    Claim,
    /// Confirmed blocks.
    Stored,
    /// Eviction batch.
    Evict,
    /// Stage a chunk of a full snapshot.
    SyncStage,
    /// Swap a staged snapshot in.
    SyncCommit,
    /// Apply a committed snapshot in bounded steps.
    SyncPatch,
    /// Remove dead incarnations' entries in bounded batches.
    Purge,
    /// Lease expiry, dead routers, stale entries.
    Gc,
    /// Renew a router's lease.
    RouterLease,
    /// In-flight gauge of one router for one worker.
    Inflight,
    /// Read-only prefix match.
    Lookup,
    /// Read-only listing of a model's workers.
    Workers,
    /// Match, choose and claim in one atomic call.
    Route,
    /// Load reported in a response header.
    Load,
}

impl ScriptName {
    /// Every script, in a fixed order.
    pub const ALL: [ScriptName; 16] = [
        ScriptName::Heartbeat,
        ScriptName::Deregister,
        ScriptName::Claim,
        ScriptName::Stored,
        ScriptName::Evict,
        ScriptName::SyncStage,
        ScriptName::SyncCommit,
        ScriptName::SyncPatch,
        ScriptName::Purge,
        ScriptName::Gc,
        ScriptName::RouterLease,
        ScriptName::Inflight,
        ScriptName::Lookup,
        ScriptName::Workers,
        ScriptName::Route,
        ScriptName::Load,
    ];

    /// The script's file name in `lua/`, also its metric label.
    pub fn file(self) -> &'static str {
        match self {
            ScriptName::Heartbeat => "heartbeat.lua",
            ScriptName::Deregister => "deregister.lua",
            ScriptName::Claim => "claim.lua",
            ScriptName::Stored => "stored.lua",
            ScriptName::Evict => "evict.lua",
            ScriptName::SyncStage => "sync_stage.lua",
            ScriptName::SyncCommit => "sync_commit.lua",
            ScriptName::SyncPatch => "sync_patch.lua",
            ScriptName::Purge => "purge.lua",
            ScriptName::Gc => "gc.lua",
            ScriptName::RouterLease => "router_lease.lua",
            ScriptName::Inflight => "inflight.lua",
            ScriptName::Lookup => "lookup.lua",
            ScriptName::Workers => "workers.lua",
            ScriptName::Route => "route.lua",
            ScriptName::Load => "load.lua",
        }
    }

    fn body(self) -> &'static str {
        match self {
            ScriptName::Heartbeat => include_str!("../../lua/heartbeat.lua"),
            ScriptName::Deregister => include_str!("../../lua/deregister.lua"),
            ScriptName::Claim => include_str!("../../lua/claim.lua"),
            ScriptName::Stored => include_str!("../../lua/stored.lua"),
            ScriptName::Evict => include_str!("../../lua/evict.lua"),
            ScriptName::SyncStage => include_str!("../../lua/sync_stage.lua"),
            ScriptName::SyncCommit => include_str!("../../lua/sync_commit.lua"),
            ScriptName::SyncPatch => include_str!("../../lua/sync_patch.lua"),
            ScriptName::Purge => include_str!("../../lua/purge.lua"),
            ScriptName::Gc => include_str!("../../lua/gc.lua"),
            ScriptName::RouterLease => include_str!("../../lua/router_lease.lua"),
            ScriptName::Inflight => include_str!("../../lua/inflight.lua"),
            ScriptName::Lookup => include_str!("../../lua/lookup.lua"),
            ScriptName::Workers => include_str!("../../lua/workers.lua"),
            ScriptName::Route => include_str!("../../lua/route.lua"),
            ScriptName::Load => include_str!("../../lua/load.lua"),
        }
    }

    /// Read-only scripts run with EVALSHA_RO, so replicas may serve them.
    fn read_only(self) -> bool {
        matches!(self, ScriptName::Lookup | ScriptName::Workers)
    }
}

struct LoadedScript {
    source: String,
    sha: String,
}

/// The scripts with their SHA-1 digests. Calls use EVALSHA; a NOSCRIPT reply
/// (Valkey restarted, flushed or failed over) loads the script and retries once.
pub struct ScriptSet {
    scripts: Vec<LoadedScript>,
}

impl Default for ScriptSet {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptSet {
    /// The scripts compiled into this binary.
    pub fn new() -> Self {
        let scripts = ScriptName::ALL
            .iter()
            .map(|name| {
                let source = format!("{PRELUDE}\n{}", name.body());
                let sha = redis::Script::new(&source).get_hash().to_owned();
                LoadedScript { source, sha }
            })
            .collect();
        ScriptSet { scripts }
    }

    fn get(&self, name: ScriptName) -> &LoadedScript {
        // ALL lists the variants in declaration order.
        &self.scripts[name as usize]
    }

    /// The full source of a script, prelude included (for tests and tools).
    pub fn source(&self, name: ScriptName) -> &str {
        &self.get(name).source
    }

    /// SCRIPT LOAD of every script on this connection's server.
    pub async fn load_all<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<(), StateError> {
        for name in ScriptName::ALL {
            self.load(conn, name).await?;
        }
        Ok(())
    }

    async fn load<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: ScriptName,
    ) -> Result<(), StateError> {
        let script = self.get(name);
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&script.source)
            .query_async(conn)
            .await
            .map_err(|e| StateError::from_redis(name.file(), e))?;
        if sha != script.sha {
            return Err(StateError::Script {
                script: name.file(),
                detail: format!("server returned sha {sha}, expected {}", script.sha),
            });
        }
        Ok(())
    }

    /// Runs `name` with `keys` and `args`, reloading it once on NOSCRIPT.
    pub async fn call<T, C>(
        &self,
        conn: &mut C,
        name: ScriptName,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T, StateError>
    where
        T: FromRedisValue,
        C: ConnectionLike + Send,
    {
        let started = Instant::now();
        let mut result = self.evalsha(conn, name, keys, args).await;
        if matches!(&result, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
            metrics::counter!("prefix_router_script_reloads_total", "script" => name.file())
                .increment(1);
            self.load(conn, name).await?;
            result = self.evalsha(conn, name, keys, args).await;
        }
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("prefix_router_script_calls_total", "script" => name.file(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!("prefix_router_script_seconds", "script" => name.file())
            .record(started.elapsed().as_secs_f64());
        result.map_err(|e| StateError::from_redis(name.file(), e))
    }

    async fn evalsha<T, C>(
        &self,
        conn: &mut C,
        name: ScriptName,
        keys: &[&str],
        args: &[&str],
    ) -> redis::RedisResult<T>
    where
        T: FromRedisValue,
        C: ConnectionLike + Send,
    {
        let command = if name.read_only() {
            "EVALSHA_RO"
        } else {
            "EVALSHA"
        };
        redis::cmd(command)
            .arg(&self.get(name).sha)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query_async(conn)
            .await
    }
}
