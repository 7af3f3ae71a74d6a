//! [`ScriptSet`]: the Lua scripts of `lua/`, built into one Valkey function
//! library (`FUNCTION LOAD`) and called with `FCALL`.
//!
//! A library defines the helpers (`lib.lua`, `lib_sync.lua`,
//! `lib_entries.lua`, `lib_blocks.lua`, `lib_view.lua`, `lib_leases.lua`, `lib_routing.lua`,
//! concatenated in that order: each uses the locals of those before it) once per
//! load rather than once per call (an `EVALSHA` script runs its whole
//! prelude on every call), and it
//! lives in the functions' own small Lua heap. Its name and its functions'
//! names carry a digest of the code, so routers of two versions can share a
//! Valkey during a rolling upgrade, each calling its own functions.

use std::fmt::Write as _;
use std::time::Instant;

use redis::FromRedisValue;
use redis::aio::ConnectionLike;
use sha2::{Digest, Sha256};

use super::StateError;

const PRELUDE: &str = concat!(
    include_str!("../lua/lib.lua"),
    "\n",
    include_str!("../lua/lib_sync.lua"),
    "\n",
    include_str!("../lua/lib_entries.lua"),
    "\n",
    include_str!("../lua/lib_blocks.lua"),
    "\n",
    include_str!("../lua/lib_view.lua"),
    "\n",
    include_str!("../lua/lib_leases.lua"),
    "\n",
    include_str!("../lua/lib_routing.lua")
);

/// One script of `lua/`: a function of the library, over the shared helpers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptName {
    /// Register a worker or renew its lease.
    Heartbeat,
    /// Stop routing to a worker and queue its entries for purge.
    Deregister,
    /// Mark a live worker draining, or clear the mark.
    Drain,
    /// List a model's draining workers and their deadlines.
    Drains,
    /// Speculative insert on routing.
    Claim,
    /// Confirmed blocks.
    Stored,
    /// Eviction batch.
    Evict,
    /// One flush's stored and evicted blocks, in order.
    ApplyEvents,
    /// Stage a chunk of a full snapshot.
    SyncStage,
    /// Swap a staged snapshot in.
    SyncCommit,
    /// Abort a staged snapshot whose chunk was refused.
    SyncAbort,
    /// Apply a committed snapshot in bounded steps.
    SyncPatch,
    /// Compare a snapshot's digests with the membership's.
    SyncCheck,
    /// Remove the blocks a repair found the worker no longer holds.
    SyncRepair,
    /// Remove dead incarnations' entries in bounded batches.
    Purge,
    /// Lease expiry, dead routers, stale entries.
    Gc,
    /// Renew a router's lease.
    RouterLease,
    /// In-flight gauge of one router for one worker.
    ChangeInFlight,
    /// Read-only prefix match.
    Probe,
    /// Read-only listing of a model's workers.
    Workers,
    /// Match, choose and claim in one atomic call.
    Route,
    /// Load reported in a response header.
    ReportLoad,
    /// Admit a response to the response cache, within its byte budget.
    ResponsePut,
    /// Flow control: saturation, an arriving request's place, dispatches.
    FlowDispatch,
    /// Flow control: requests leave the waiting room.
    FlowLeave,
    /// Admit a tenant's request against its fleet-wide limits.
    LimitAdmit,
    /// Correct a tenant's tokens by an answer's usage; release its place.
    LimitSettle,
    /// Renew a router's lease on a tenant's requests in flight.
    LimitLease,
}

impl ScriptName {
    /// Every script, in a fixed order.
    pub const ALL: [ScriptName; 28] = [
        ScriptName::Heartbeat,
        ScriptName::Deregister,
        ScriptName::Drain,
        ScriptName::Drains,
        ScriptName::Claim,
        ScriptName::Stored,
        ScriptName::Evict,
        ScriptName::ApplyEvents,
        ScriptName::SyncStage,
        ScriptName::SyncCommit,
        ScriptName::SyncAbort,
        ScriptName::SyncPatch,
        ScriptName::SyncCheck,
        ScriptName::SyncRepair,
        ScriptName::Purge,
        ScriptName::Gc,
        ScriptName::RouterLease,
        ScriptName::ChangeInFlight,
        ScriptName::Probe,
        ScriptName::Workers,
        ScriptName::Route,
        ScriptName::ReportLoad,
        ScriptName::ResponsePut,
        ScriptName::FlowDispatch,
        ScriptName::FlowLeave,
        ScriptName::LimitAdmit,
        ScriptName::LimitSettle,
        ScriptName::LimitLease,
    ];

    /// The script's file name in `lua/`, also its metric label.
    pub fn file(self) -> &'static str {
        match self {
            ScriptName::Heartbeat => "heartbeat.lua",
            ScriptName::Deregister => "deregister.lua",
            ScriptName::Drain => "drain.lua",
            ScriptName::Drains => "drains.lua",
            ScriptName::Claim => "claim.lua",
            ScriptName::Stored => "stored.lua",
            ScriptName::Evict => "evict.lua",
            ScriptName::ApplyEvents => "apply_events.lua",
            ScriptName::SyncStage => "sync_stage.lua",
            ScriptName::SyncCommit => "sync_commit.lua",
            ScriptName::SyncAbort => "sync_abort.lua",
            ScriptName::SyncPatch => "sync_patch.lua",
            ScriptName::SyncCheck => "sync_check.lua",
            ScriptName::SyncRepair => "sync_repair.lua",
            ScriptName::Purge => "purge.lua",
            ScriptName::Gc => "gc.lua",
            ScriptName::RouterLease => "router_lease.lua",
            ScriptName::ChangeInFlight => "change_in_flight.lua",
            ScriptName::Probe => "probe.lua",
            ScriptName::Workers => "workers.lua",
            ScriptName::Route => "route.lua",
            ScriptName::ReportLoad => "report_load.lua",
            ScriptName::ResponsePut => "response_put.lua",
            ScriptName::FlowDispatch => "flow_dispatch.lua",
            ScriptName::FlowLeave => "flow_leave.lua",
            ScriptName::LimitAdmit => "limit_admit.lua",
            ScriptName::LimitSettle => "limit_settle.lua",
            ScriptName::LimitLease => "limit_lease.lua",
        }
    }

    fn body(self) -> &'static str {
        match self {
            ScriptName::Heartbeat => include_str!("../lua/heartbeat.lua"),
            ScriptName::Deregister => include_str!("../lua/deregister.lua"),
            ScriptName::Drain => include_str!("../lua/drain.lua"),
            ScriptName::Drains => include_str!("../lua/drains.lua"),
            ScriptName::Claim => include_str!("../lua/claim.lua"),
            ScriptName::Stored => include_str!("../lua/stored.lua"),
            ScriptName::Evict => include_str!("../lua/evict.lua"),
            ScriptName::ApplyEvents => include_str!("../lua/apply_events.lua"),
            ScriptName::SyncStage => include_str!("../lua/sync_stage.lua"),
            ScriptName::SyncCommit => include_str!("../lua/sync_commit.lua"),
            ScriptName::SyncAbort => include_str!("../lua/sync_abort.lua"),
            ScriptName::SyncPatch => include_str!("../lua/sync_patch.lua"),
            ScriptName::SyncCheck => include_str!("../lua/sync_check.lua"),
            ScriptName::SyncRepair => include_str!("../lua/sync_repair.lua"),
            ScriptName::Purge => include_str!("../lua/purge.lua"),
            ScriptName::Gc => include_str!("../lua/gc.lua"),
            ScriptName::RouterLease => include_str!("../lua/router_lease.lua"),
            ScriptName::ChangeInFlight => include_str!("../lua/change_in_flight.lua"),
            ScriptName::Probe => include_str!("../lua/probe.lua"),
            ScriptName::Workers => include_str!("../lua/workers.lua"),
            ScriptName::Route => include_str!("../lua/route.lua"),
            ScriptName::ReportLoad => include_str!("../lua/report_load.lua"),
            ScriptName::ResponsePut => include_str!("../lua/response_put.lua"),
            ScriptName::FlowDispatch => include_str!("../lua/flow_dispatch.lua"),
            ScriptName::FlowLeave => include_str!("../lua/flow_leave.lua"),
            ScriptName::LimitAdmit => include_str!("../lua/limit_admit.lua"),
            ScriptName::LimitSettle => include_str!("../lua/limit_settle.lua"),
            ScriptName::LimitLease => include_str!("../lua/limit_lease.lua"),
        }
    }

    /// Read-only scripts are called with FCALL_RO, so replicas may serve them.
    fn read_only(self) -> bool {
        matches!(
            self,
            ScriptName::Probe | ScriptName::Workers | ScriptName::Drains
        )
    }

    /// The script's name inside the library (its file name without `.lua`).
    fn stem(self) -> &'static str {
        self.file().trim_end_matches(".lua")
    }
}

/// The function library and the names of its functions. Calls use FCALL; a
/// "Function not found" reply (Valkey restarted, flushed or failed over)
/// loads the library and retries once.
pub struct ScriptSet {
    library: String,
    functions: Vec<String>,
}

impl Default for ScriptSet {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptSet {
    /// The scripts compiled into this binary, as one library.
    pub fn new() -> Self {
        let mut code = String::from(PRELUDE);
        for name in ScriptName::ALL {
            // Each body runs as a function: its top-level locals and `return`
            // stay what they are in a plain script.
            let _ = write!(
                code,
                "\nlocal function script_{}()\n{}\nend\n",
                name.stem(),
                name.body()
            );
        }
        let digest = Sha256::digest(code.as_bytes());
        let tag: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        let mut functions = Vec::with_capacity(ScriptName::ALL.len());
        for name in ScriptName::ALL {
            let function = format!("prefix_router_{tag}_{}", name.stem());
            let flags = if name.read_only() {
                ", flags = { 'no-writes' }"
            } else {
                ""
            };
            let _ = writeln!(
                code,
                "redis.register_function{{ function_name = '{function}', \
                 callback = function(keys, args) return enter(keys, args, script_{}, {}) end{flags} }}",
                name.stem(),
                !name.read_only()
            );
            functions.push(function);
        }
        ScriptSet {
            library: format!("#!lua name=prefix_router_{tag}\n{code}"),
            functions,
        }
    }

    /// The library's source, as sent with FUNCTION LOAD (for tests and tools).
    pub fn library(&self) -> &str {
        &self.library
    }

    /// The name `name` is registered under (what FCALL and SLOWLOG show).
    pub fn function(&self, name: ScriptName) -> &str {
        // ALL lists the variants in declaration order.
        &self.functions[name as usize]
    }

    /// FUNCTION LOAD of the library on this connection's server (REPLACE:
    /// the same name always means the same code, so replacing is a no-op).
    pub async fn load_all<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<(), StateError> {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&self.library)
            .query_async(conn)
            .await
            .map_err(|e| StateError::from_redis("library", e))?;
        Ok(())
    }

    /// Runs `name` with `keys` and `args`, loading the library once if the
    /// server does not have it.
    pub async fn call<T, C>(
        &self,
        conn: &mut C,
        name: ScriptName,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T, StateError>
    where
        T: FromRedisValue,
        C: ConnectionLike + Send,
    {
        let started = Instant::now();
        let mut result = self.fcall(conn, name, keys, args).await;
        if matches!(&result, Err(e) if is_function_missing(e)) {
            metrics::counter!("prefix_router_script_reloads_total", "script" => name.file())
                .increment(1);
            self.load_all(conn).await?;
            result = self.fcall(conn, name, keys, args).await;
        }
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("prefix_router_script_calls_total", "script" => name.file(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!("prefix_router_script_seconds", "script" => name.file())
            .record(started.elapsed().as_secs_f64());
        result.map_err(|e| StateError::from_redis(name.file(), e))
    }

    async fn fcall<T, C>(
        &self,
        conn: &mut C,
        name: ScriptName,
        keys: &[&str],
        args: &[&[u8]],
    ) -> redis::RedisResult<T>
    where
        T: FromRedisValue,
        C: ConnectionLike + Send,
    {
        let command = if name.read_only() {
            "FCALL_RO"
        } else {
            "FCALL"
        };
        redis::cmd(command)
            .arg(self.function(name))
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .query_async(conn)
            .await
    }
}

/// Valkey's reply to FCALL of a function it does not have.
fn is_function_missing(e: &redis::RedisError) -> bool {
    e.detail()
        .is_some_and(|d| d.starts_with("Function not found"))
}

#[cfg(test)]
#[path = "scripts_tests.rs"]
mod tests;
