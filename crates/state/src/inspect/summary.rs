//! [`Summary`]: what an operator wants to know about the fleet's state, per
//! model: workers and their blocks and load, routers, the forward map's
//! size, the purge backlog, syncs in progress. Sizes come from SCARD/HLEN,
//! never from reading the maps themselves.

use std::collections::BTreeMap;

use serde::Serialize;

use super::InspectError;
use super::conn::{Reader, int};
use super::inventory::ModelInventory;
use super::meta::ModelMeta;
use super::schema::{ModelKey, ModelKeys};

/// The whole namespace, as read.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The Valkey URL, password redacted.
    pub valkey: String,
    /// The `--key-prefix`.
    pub namespace: String,
    /// Keys under the namespace (or the model).
    pub keys: u64,
    /// Of which outside the schema (`--check` names them).
    pub unknown_keys: u64,
    /// Per model, sorted by name.
    pub models: Vec<ModelSummary>,
}

/// One model's state.
#[derive(Debug, Clone, Serialize)]
pub struct ModelSummary {
    /// The model name.
    pub model: String,
    /// Whether `<ns>:models` lists it.
    pub listed: bool,
    /// Server time of the read, unix ms.
    pub now_ms: i64,
    /// The last incarnation number handed out.
    pub seq: Option<u64>,
    /// Every incarnation: live, expired (not collected yet) and draining.
    pub workers: Vec<WorkerSummary>,
    /// Router leases.
    pub routers: Vec<RouterSummary>,
    /// The forward map's size.
    pub forward: ForwardSummary,
    /// Dead incarnations whose entries are still being removed.
    pub purge: PurgeSummary,
    /// Committed syncs being applied.
    pub syncs: Vec<SyncSummary>,
    /// Snapshots being uploaded, not committed yet.
    pub staged_syncs: u64,
    /// Where the gc sweep is (`idx`, `phase`, `cursor`).
    pub gc: BTreeMap<String, String>,
}

/// One worker incarnation.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerSummary {
    /// The worker's id (empty if its record is gone).
    pub worker_id: String,
    /// The incarnation number.
    pub incarnation: u64,
    /// Its base URL.
    pub url: String,
    /// `live`, `expired` (lease over, not collected yet) or `draining`.
    pub status: &'static str,
    /// Time left on its lease (negative once expired); none when draining.
    pub lease_left_ms: Option<i64>,
    /// Entries in its reverse map.
    pub blocks: u64,
    /// Of which speculative.
    pub speculative: u64,
    /// The load it last reported.
    pub load: LoadSummary,
    /// Time since its last heartbeat.
    pub heartbeat_age_ms: Option<i64>,
    /// Requests in flight to it, per router (from the routing view).
    pub in_flight: BTreeMap<String, i64>,
    /// The sum over routers with a live lease: what routing counts.
    pub in_flight_counted: i64,
    /// True while a committed sync is being applied.
    pub syncing: bool,
    /// Its prefill/decode role (`both` when the record names none).
    pub role: String,
}

/// A worker's last reported load.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadSummary {
    /// Requests queued.
    pub waiting: Option<u64>,
    /// Requests running.
    pub running: Option<u64>,
    /// KV cache usage, 0 to 1.
    pub kv_usage: Option<f64>,
    /// Age of the report.
    pub age_ms: Option<i64>,
}

/// One router's lease.
#[derive(Debug, Clone, Serialize)]
pub struct RouterSummary {
    /// The router id.
    pub router_id: String,
    /// Time left on its lease (negative once expired).
    pub lease_left_ms: i64,
    /// Its lease is live (its in-flight counts weigh on routing).
    pub live: bool,
    /// Requests it has in flight, over all workers.
    pub in_flight: i64,
}

/// The forward map's size.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ForwardSummary {
    /// Bucket keys (`f:<bucket>`, at most 8,192).
    pub buckets: u64,
    /// Block hashes with at least one entry (fields over all buckets).
    pub hashes: u64,
    /// (block, worker) entries: the reverse sets' sizes summed.
    pub entries: u64,
}

/// The purge backlog.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PurgeSummary {
    /// Incarnations queued for purge.
    pub incarnations: Vec<u64>,
    /// Their entries still to remove.
    pub entries_left: u64,
}

/// A committed sync being patched in.
#[derive(Debug, Clone, Serialize)]
pub struct SyncSummary {
    /// The incarnation.
    pub incarnation: u64,
    /// Its worker id.
    pub worker_id: String,
    /// `add` or `remove`.
    pub phase: String,
    /// The patch's SSCAN cursor.
    pub cursor: String,
    /// Size of the sync target `s:<idx>`.
    pub target: u64,
    /// Time since the last patch step (gc resumes it once stalled).
    pub idle_ms: Option<i64>,
}

/// SCARD (or HLEN) of each key, pipelined in chunks; 0 for missing keys.
async fn sizes(
    reader: &mut Reader,
    cmd: &str,
    keys: Vec<String>,
) -> Result<Vec<u64>, InspectError> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(512) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.cmd(cmd).arg(k);
        }
        let values = reader.pipe(cmd, pipe, false).await?;
        out.extend(
            values
                .iter()
                .map(|v| int(v).and_then(|n| u64::try_from(n).ok()).unwrap_or(0)),
        );
    }
    out.resize(keys.len(), 0);
    Ok(out)
}

/// Summarises one model from its inventory and small keys.
pub(crate) async fn model_summary(
    reader: &mut Reader,
    mk: &ModelKeys,
    model: &str,
    inv: &ModelInventory,
    meta: &ModelMeta,
) -> Result<ModelSummary, InspectError> {
    let now = meta.now_ms;
    let mut idxs: Vec<(u64, &'static str, Option<i64>)> = meta
        .leases
        .iter()
        .map(|(&i, &lease)| {
            (
                i,
                if lease > now { "live" } else { "expired" },
                Some(lease - now),
            )
        })
        .collect();
    idxs.extend(
        meta.purge
            .iter()
            .filter(|i| !meta.leases.contains_key(i))
            .map(|&i| (i, "draining", None)),
    );
    let count = |k: fn(u64) -> ModelKey, i: u64| mk.name(&k(i));
    let blocks = sizes(
        reader,
        "SCARD",
        idxs.iter().map(|w| count(ModelKey::Reverse, w.0)).collect(),
    )
    .await?;
    let spec = sizes(
        reader,
        "SCARD",
        idxs.iter().map(|w| count(ModelKey::Spec, w.0)).collect(),
    )
    .await?;
    let live_router = |r: &str| meta.routers.get(r).is_some_and(|&l| l > now);
    let mut per_router: BTreeMap<String, i64> = BTreeMap::new();
    let mut workers = Vec::with_capacity(idxs.len());
    for (n, (i, status, lease_left)) in idxs.iter().enumerate() {
        let rec = meta.records.get(i).cloned().unwrap_or_default();
        let field = |f: &str| rec.get(f).filter(|v| !v.is_empty()).cloned();
        let age = |f: &str| {
            field(f)
                .and_then(|v| v.parse::<i64>().ok())
                .map(|t| now - t)
        };
        let in_flight: BTreeMap<String, i64> = meta
            .in_flight()
            .filter(|(w, _, _)| w == i)
            .map(|(_, r, c)| (r.to_owned(), c))
            .collect();
        for (r, c) in &in_flight {
            *per_router.entry(r.clone()).or_default() += c;
        }
        workers.push(WorkerSummary {
            worker_id: field("id").unwrap_or_default(),
            incarnation: *i,
            url: field("url").unwrap_or_default(),
            status,
            lease_left_ms: *lease_left,
            blocks: blocks[n],
            speculative: spec[n],
            load: LoadSummary {
                waiting: field("waiting").and_then(|v| v.parse().ok()),
                running: field("running").and_then(|v| v.parse().ok()),
                kv_usage: field("kv_usage").and_then(|v| v.parse().ok()),
                age_ms: age("load_ms"),
            },
            heartbeat_age_ms: age("heartbeat_ms"),
            in_flight_counted: in_flight
                .iter()
                .filter(|(r, _)| live_router(r))
                .map(|(_, c)| c.max(&0))
                .sum(),
            in_flight,
            syncing: field("syncing").as_deref() == Some("1"),
            role: field("role").unwrap_or_else(|| "both".into()),
        });
    }
    let routers = meta
        .routers
        .iter()
        .map(|(r, &lease)| RouterSummary {
            router_id: r.clone(),
            lease_left_ms: lease - now,
            live: lease > now,
            in_flight: per_router.get(r).copied().unwrap_or(0),
        })
        .collect();
    let hashes = sizes(
        reader,
        "HLEN",
        inv.buckets
            .iter()
            .map(|&b| mk.name(&ModelKey::Bucket(b)))
            .collect(),
    )
    .await?;
    let entries = sizes(
        reader,
        "SCARD",
        inv.reverse
            .iter()
            .map(|&i| count(ModelKey::Reverse, i))
            .collect(),
    )
    .await?;
    let draining: Vec<u64> = meta.purge.iter().copied().collect();
    let left = sizes(
        reader,
        "SCARD",
        draining
            .iter()
            .map(|&i| count(ModelKey::Reverse, i))
            .collect(),
    )
    .await?;
    let syncing: Vec<u64> = meta
        .records
        .iter()
        .filter(|(_, r)| r.get("syncing").map(String::as_str) == Some("1"))
        .map(|(&i, _)| i)
        .collect();
    let targets = sizes(
        reader,
        "SCARD",
        syncing
            .iter()
            .map(|&i| count(ModelKey::Target, i))
            .collect(),
    )
    .await?;
    let syncs = syncing
        .iter()
        .zip(targets)
        .map(|(i, target)| {
            let rec = meta.records.get(i).cloned().unwrap_or_default();
            let get = |f: &str| rec.get(f).cloned().unwrap_or_default();
            SyncSummary {
                incarnation: *i,
                worker_id: get("id"),
                phase: get("patch_phase"),
                cursor: get("patch_cursor"),
                target,
                idle_ms: get("patch_ms").parse::<i64>().ok().map(|t| now - t),
            }
        })
        .collect();
    Ok(ModelSummary {
        model: model.to_owned(),
        listed: meta.listed,
        now_ms: now,
        seq: meta.seq.as_deref().and_then(|s| s.parse().ok()),
        workers,
        routers,
        forward: ForwardSummary {
            buckets: inv.buckets.len() as u64,
            hashes: hashes.iter().sum(),
            entries: entries.iter().sum(),
        },
        purge: PurgeSummary {
            entries_left: left.iter().sum(),
            incarnations: draining,
        },
        syncs,
        staged_syncs: inv.stages,
        gc: meta.gc.clone(),
    })
}
