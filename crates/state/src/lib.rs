//! The fleet's shared state in Valkey: forward and reverse maps, leases,
//! load gauges, and the operator's read-only view of them.
//!
//! Every mutation is one of the atomic Lua scripts in `lua/` (beside this
//! crate's `src/`, compiled in); [`StateStore`] names keys, chunks inputs so
//! that no script runs much longer than 1 ms, and keeps routing calls on
//! their own multiplexed connection so that they never queue behind bulk
//! work (syncs, purges, gc) on theirs. docs/state.md has the key schema.
//!
//! Layout (depends on `protocol`; nothing here knows HTTP):
//!
//! * `keys`: [`KeySpace`], every key name of a namespace.
//! * `shards`: [`Sharding`], a model split into parts by prefix family
//!   (`protocol::family`), one hash tag each, for a Valkey Cluster.
//! * `connections`: the routing lane and the bulk lane, or cluster
//!   connections given several seeds ([`ConnectionSettings`]).
//! * `serving_thread`: which serving thread (one runtime per core) the
//!   current thread is, so that each has its own connections.
//! * `scripts`: the Lua library, loaded and called by name ([`ScriptName`]).
//! * `ttl`: [`StateTtls`] and [`BatchLimits`].
//! * `leases`: worker heartbeats (with their prefill/decode role), drains
//!   and load reports, in-flight gauges.
//! * `drain`: graceful drain: a live worker marked draining
//!   (`drain.lua`) is out of routing but still serving; routers list the
//!   draining workers and their deadlines (`drains.lua`).
//! * `router_lease`: this router's leases, which reconcile the shared
//!   in-flight gauges with its ledger.
//! * `fan_out`: a sharded model's per-request changes for the parts that
//!   did not route it (in-flight counts, load reports), and every model's
//!   prefill ends, batched per part.
//! * `in_flight`: [`InFlight`] (requests and their prefill tokens) and this
//!   router's ledger of them, which each router lease renewal reconciles
//!   the shared gauges with.
//! * `blocks`: stored blocks (on their KV tier: GPU, CPU, disk), evictions,
//!   claims of blocks on routing; `events`: one flush's stored and evicted
//!   blocks in the worker's order ([`BlockEvent`], `apply_events.lua`).
//! * `sync`: destructive snapshots, whole or staged in chunks, with their
//!   blocks' tiers; `sync_check`: the digest check before one (equal: the
//!   entries renewed, nothing sent).
//! * `repair`: a sync of only the digest buckets that differ (membership,
//!   then tiers).
//! * `probe`: read-only probes of which worker holds how much of a prompt,
//!   per tier (`probe.lua`), and the worker listing; `views`: their types
//!   and the parsing of the scripts' replies into them.
//! * `route_claim`: the cache-aware policy's inputs ([`RouteParams`], whose
//!   `Default` is the one definition of its defaults) and its atomic call
//!   (`route.lua`):
//!   probe, route (choose the worker) and claim, in one step.
//! * `view_record`: the routing view's binary per-worker records (with the
//!   worker's prefill/decode role, when it has one).
//! * `response_cache`: the optional response cache's entries, admitted
//!   within a byte budget (`response_put.lua`), read with a plain GET.
//! * `flow`: flow control's fleet-wide waiting room (`flow_dispatch.lua`,
//!   `flow_leave.lua`): saturation, priorities, tenants' shares, dispatch.
//! * `tenant_limits`: a tenant's fleet-wide limits (`limit_*.lua`):
//!   requests and tokens per window (GCRA), requests in flight under a
//!   per-router lease.
//! * `gc`: the periodic cleanup every router runs.
//! * `models`: the cap on models ([`ModelLimits`]) and forgetting a model
//!   gc found without workers for the grace period.
//! * `error`: [`StateError`], by what a caller can do about it.
//! * [`inspect`]: `prefix-router inspect`, read-only, and `--check`.
//!
//! Within: every concern is an `impl StateStore` block over `scripts` and
//! `connections`, reaching a model's parts through `shards`; `inspect` reads keys directly, through `keys` and
//! `view_record`, and never writes.

mod blocks;
mod connections;
mod drain;
mod error;
mod events;
mod fan_out;
mod flow;
mod gc;
mod in_flight;
pub mod inspect;
mod keys;
mod leases;
mod models;
mod probe;
mod repair;
mod response_cache;
mod route_claim;
mod router_lease;
mod scripts;
mod serving_thread;
mod shards;
mod sync;
mod sync_check;
mod tenant_limits;
mod ttl;
mod view_record;
mod views;

pub use blocks::StoredOutcome;
pub use connections::{ConnectionSettings, normalize_url};
pub use drain::{Draining, MAX_DRAIN_DEADLINE};
pub use error::StateError;
pub use events::{BlockEvent, EventsOutcome};
pub use flow::{Arrival, FlowArrival, FlowDispatch, SaturationThresholds, flow_member};
pub use gc::GcReport;
pub use in_flight::InFlight;
pub use keys::KeySpace;
pub use leases::{WorkerHeartbeat, WorkerLease};
pub use models::ModelLimits;
pub use repair::{MAX_REPAIR_BUCKETS, RepairOutcome};
pub use response_cache::ResponsePut;
pub use route_claim::{
    DEFAULT_LOAD_SLACK, ROUTE_CLAIM, ROUTE_HEAD, RouteOutcome, RouteParams, STALE_LOAD,
};
pub use scripts::{ScriptName, ScriptSet};
use serving_thread::serving_slot;
pub use serving_thread::{serving_thread, set_serving_thread};
pub use shards::{Sharding, key_slot, part_model, part_names};
pub use sync::SyncOutcome;
pub use tenant_limits::{Gcra, LimitCheck, LimitReason, LimitVerdict};
pub use ttl::{BatchLimits, StateTtls};
pub use view_record::ViewRecord;
pub use views::{PrefixProbe, TierBlocks, WorkerInfo, WorkerMatch, WorkerStatus};

use connections::Connections;
use protocol::{WorkerLoad, check_name};
use std::sync::Arc;

use protocol::hashing::BlockHash;

/// Handle on the shared state of one fleet namespace. Cheap to clone.
#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Inner>,
}

struct Inner {
    keys: KeySpace,
    conns: Arc<Connections>,
    scripts: ScriptSet,
    ttls: StateTtls,
    limits: BatchLimits,
    router_id: String,
    /// Models this process has renewed its router lease for (the first
    /// renewal also clears counts left under the same router id).
    leased: std::sync::Mutex<std::collections::HashSet<String>>,
    /// When a request last leased a model before its first count
    /// ([`StateStore::lease_if_new`]); one at a time.
    first_lease: tokio::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// What this process holds in flight, per model and worker.
    ledger: in_flight::Ledger,
    /// The cap on models and the grace before an empty one is forgotten.
    model_limits: std::sync::RwLock<ModelLimits>,
    /// Models seen in `<ns>:models` (so that a heartbeat of a known model
    /// costs no admission check).
    known_models: std::sync::Mutex<std::collections::HashSet<String>>,
    /// How models are split, and their part names.
    sharding: std::sync::RwLock<Sharding>,
    parts: shards::PartNames,
    /// A sharded model's batched per-request changes.
    fan_out: fan_out::FanOut,
}

/// Which connection a call goes on.
#[derive(Debug, Clone, Copy)]
enum Lane {
    /// The multiplexed routing connection: probes, claims, gauges.
    Hot,
    /// The pool: reports from workers, syncs, gc, purges, listings.
    Bulk,
}

impl StateStore {
    /// A store for `settings.url`; connects lazily, so it works (and reports
    /// `Unavailable`) while Valkey is down.
    pub fn new(
        settings: ConnectionSettings,
        key_prefix: &str,
        router_id: &str,
        ttls: StateTtls,
        limits: BatchLimits,
    ) -> Result<Self, StateError> {
        check_name("router id", router_id)?;
        Ok(StateStore {
            inner: Arc::new(Inner {
                keys: KeySpace::new(key_prefix)?,
                conns: Arc::new(Connections::new(settings)?),
                scripts: ScriptSet::new(),
                ttls,
                limits,
                router_id: router_id.to_owned(),
                leased: Default::default(),
                first_lease: Default::default(),
                ledger: Default::default(),
                model_limits: Default::default(),
                known_models: Default::default(),
                sharding: Default::default(),
                parts: Default::default(),
                fan_out: Default::default(),
            }),
        })
    }

    /// The key names of this namespace.
    pub fn keys(&self) -> &KeySpace {
        &self.inner.keys
    }

    /// The TTLs this store writes with.
    pub fn ttls(&self) -> &StateTtls {
        &self.inner.ttls
    }

    /// The chunk sizes and request caps this store applies.
    pub fn limits(&self) -> &BatchLimits {
        &self.inner.limits
    }

    /// This router's id (its in-flight gauges and lease are kept under it).
    pub fn router_id(&self) -> &str {
        &self.inner.router_id
    }

    fn leased_models(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.inner.leased.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connects the routing lane now, waiting up to the bulk deadline
    /// (routing calls never wait for a connection: they fall back).
    pub async fn connect(&self) -> Result<(), StateError> {
        self.inner.conns.connect_hot().await
    }

    /// PING on the routing connection: is Valkey reachable now?
    pub async fn ping(&self) -> Result<(), StateError> {
        self.inner.conns.ping().await
    }

    /// Runs a script for `part` (a model, or one part of a sharded model:
    /// see `shards`) on `lane`; ARGV[1] is the part's key base.
    async fn run<T: redis::FromRedisValue>(
        &self,
        lane: Lane,
        name: ScriptName,
        part: &str,
        args: &[&str],
    ) -> Result<T, StateError> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.run_bytes(lane, name, part, &args).await
    }

    /// [`run`](Self::run) with arguments that need not be text.
    async fn run_bytes<T: redis::FromRedisValue>(
        &self,
        lane: Lane,
        name: ScriptName,
        part: &str,
        args: &[&[u8]],
    ) -> Result<T, StateError> {
        check_name("model", part)?;
        let keys = &self.inner.keys;
        let ids = keys.worker_ids(part);
        let base = keys.model_base(part);
        let mut argv: Vec<&[u8]> = Vec::with_capacity(args.len() + 1);
        argv.push(base.as_bytes());
        argv.extend_from_slice(args);
        let scripts = &self.inner.scripts;
        match lane {
            Lane::Hot => {
                self.inner
                    .conns
                    .with_hot(
                        |mut c| async move { scripts.call(&mut c, name, &[&ids], &argv).await },
                    )
                    .await
            }
            Lane::Bulk => {
                self.inner
                    .conns
                    .with_bulk(
                        |mut c| async move { scripts.call(&mut c, name, &[&ids], &argv).await },
                    )
                    .await
            }
        }
    }

    /// Runs a plain command on the bulk lane (index keys outside any script).
    async fn command<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, StateError> {
        self.inner
            .conns
            .with_bulk(|mut c| async move {
                cmd.query_async(&mut c)
                    .await
                    .map_err(|e| StateError::from_redis("command", e))
            })
            .await
    }
}

/// `hashes` in chunks of `size`; an empty list gives one empty chunk, so
/// that the script still runs and checks the worker.
fn chunks_or_empty(hashes: &[BlockHash], size: usize) -> impl Iterator<Item = &[BlockHash]> {
    let empty = hashes.is_empty().then_some(hashes);
    hashes.chunks(size.max(1)).chain(empty)
}

/// True when `s` is `len` lower-case hex digits (digests, keys).
fn lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Hex forms of `hashes`, as the scripts take them.
fn hex_args(hashes: &[BlockHash]) -> Vec<String> {
    hashes.iter().map(|h| h.to_hex()).collect()
}

/// Maps a script's "ERR unknown worker" to [`StateError::UnknownWorker`].
fn unknown_worker(err: StateError, model: &str, worker_id: &str) -> StateError {
    match err {
        StateError::Script { ref detail, .. } if detail.contains("unknown worker") => {
            StateError::UnknownWorker {
                worker_id: worker_id.to_owned(),
                model: model.to_owned(),
            }
        }
        other => other,
    }
}
