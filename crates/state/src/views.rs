//! The read-only views' types ([`WorkerInfo`], [`WorkerMatch`] and its
//! tiers, [`PrefixProbe`], [`WorkerStatus`]) and the parsing of the
//! scripts' replies into them.

use std::time::Duration;

use serde::Serialize;

use super::{ScriptName, StateError, WorkerLoad};
use protocol::WorkerRole;

/// What the state says about one worker incarnation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerInfo {
    /// The worker's id.
    pub worker_id: String,
    /// Its base URL.
    pub url: String,
    /// Requests in flight to it, summed over live routers.
    pub in_flight: u64,
    /// Uncached prompt tokens of those requests still before their first
    /// token: the prefill queue the routers put on it.
    pub prefill_tokens: u64,
    /// The load it last reported.
    pub load: WorkerLoad,
    /// Age of that report; `None` when it never reported load.
    #[serde(serialize_with = "ser_ms")]
    pub load_age: Option<Duration>,
    /// Time left on its lease in ms (negative once expired).
    pub lease_left_ms: i64,
    /// Entries in its reverse map; `None` in a routing step's reply, which
    /// skips counting them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u64>,
    /// True while a committed sync is being applied.
    pub syncing: bool,
    /// Its prefill/decode role, as its heartbeats register it.
    pub role: WorkerRole,
}

/// One live worker's match for a chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerMatch {
    /// Leading blocks of the chain it holds, on any tier.
    pub matched_blocks: usize,
    /// Of those, the leading blocks it holds on the GPU.
    pub gpu_blocks: usize,
    /// Of those, the leading blocks it holds on the CPU or the GPU (at
    /// least `gpu_blocks`; the rest of the match is on disk).
    pub cpu_blocks: usize,
    /// Its state and load.
    pub info: WorkerInfo,
}

/// Blocks of a match per tier: they add up to the matched blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TierBlocks {
    /// Held on the GPU.
    pub gpu: usize,
    /// Held on the CPU at best.
    pub cpu: usize,
    /// Held on disk (or another slower tier) at best.
    pub disk: usize,
}

impl WorkerMatch {
    /// A match held wholly on the GPU.
    pub fn on_gpu(matched_blocks: usize, info: WorkerInfo) -> Self {
        WorkerMatch {
            matched_blocks,
            gpu_blocks: matched_blocks,
            cpu_blocks: matched_blocks,
            info,
        }
    }

    /// The match's blocks per tier. Tiers are prefix-closed along a chain
    /// (an engine offloads and evicts a chain's tail first), so the GPU's
    /// come first, then the CPU's, then the disk's.
    pub fn by_tier(&self) -> TierBlocks {
        let cpu = self.cpu_blocks.min(self.matched_blocks);
        let gpu = self.gpu_blocks.min(cpu);
        TierBlocks {
            gpu,
            cpu: cpu - gpu,
            disk: self.matched_blocks - cpu,
        }
    }

    /// The match `extra` blocks longer, held on the tier of its last
    /// block (tiers are prefix-closed: a longer match on the GPU is on the
    /// GPU throughout).
    pub fn extend_on_last_tier(&mut self, extra: usize) {
        let (tiers, old) = (self.by_tier(), self.matched_blocks);
        self.matched_blocks = old + extra;
        if tiers.disk > 0 {
            return;
        }
        self.cpu_blocks = old + extra;
        if tiers.cpu == 0 {
            self.gpu_blocks = old + extra;
        }
    }

    /// Maps each depth through `f` (indexed blocks to blocks covered).
    pub(super) fn map_depths(&mut self, f: impl Fn(usize) -> usize) {
        self.matched_blocks = f(self.matched_blocks);
        self.gpu_blocks = f(self.gpu_blocks);
        self.cpu_blocks = f(self.cpu_blocks);
    }
}

/// The prefix match of one chain against every live worker of a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefixProbe {
    /// Blocks examined: by a lookup, the indexed blocks scanned before no
    /// worker matched any longer; by the route, every probe (gap probes
    /// included).
    pub scanned_blocks: usize,
    /// Every live worker, in lease order.
    pub workers: Vec<WorkerMatch>,
}

/// A worker incarnation as listed for operators.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerStatus {
    /// The model it serves.
    pub model: String,
    /// Its incarnation number.
    pub incarnation: u64,
    /// `live`, `expired` (lease over, not collected yet) or `draining`.
    pub status: String,
    /// Its state and load.
    #[serde(flatten)]
    pub info: WorkerInfo,
}

fn ser_ms<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&(d.as_millis() as u64)),
        None => s.serialize_none(),
    }
}

pub(super) const INFO_FIELDS: usize = 12;

/// Decodes `scanned` and the per-worker (matched, GPU, CPU-or-GPU blocks,
/// info) fields of a reply.
pub(super) fn parse_matches(
    script: ScriptName,
    scanned: &str,
    rest: &[String],
) -> Result<PrefixProbe, StateError> {
    if !rest.len().is_multiple_of(INFO_FIELDS + 3) {
        return Err(bad_reply(
            script,
            format!("{} fields after the count", rest.len()),
        ));
    }
    let workers = rest
        .chunks(INFO_FIELDS + 3)
        .map(|w| {
            Ok(WorkerMatch {
                matched_blocks: num(script, &w[0])?,
                gpu_blocks: num(script, &w[1])?,
                cpu_blocks: num(script, &w[2])?,
                info: parse_info(script, &w[3..])?,
            })
        })
        .collect::<Result<_, StateError>>()?;
    Ok(PrefixProbe {
        scanned_blocks: num(script, scanned)?,
        workers,
    })
}

pub(super) fn bad_reply(script: ScriptName, detail: impl Into<String>) -> StateError {
    StateError::Script {
        script: script.file(),
        detail: detail.into(),
    }
}

pub(super) fn num<T: std::str::FromStr>(script: ScriptName, s: &str) -> Result<T, StateError> {
    s.parse()
        .map_err(|_| bad_reply(script, format!("not a number: {s:?}")))
}

/// Decodes the 12 fields of lib_view.lua's `worker_info`.
pub(super) fn parse_info(script: ScriptName, f: &[String]) -> Result<WorkerInfo, StateError> {
    let load_age_ms: i64 = num(script, &f[6])?;
    Ok(WorkerInfo {
        worker_id: f[0].clone(),
        url: f[1].clone(),
        in_flight: num(script, &f[2])?,
        prefill_tokens: num(script, &f[10])?,
        load: WorkerLoad {
            num_requests_waiting: num(script, &f[3])?,
            num_requests_running: num(script, &f[4])?,
            kv_cache_usage_perc: num(script, &f[5])?,
        },
        load_age: u64::try_from(load_age_ms).ok().map(Duration::from_millis),
        lease_left_ms: num(script, &f[7])?,
        blocks: u64::try_from(num::<i64>(script, &f[8])?).ok(),
        syncing: f[9] == "1",
        // A role this build does not know counts as both (view_record.rs).
        role: f[11].parse().unwrap_or_default(),
    })
}
