//! Read-only views: the prefix match of a chain, and the worker listing.

use std::time::Duration;

use serde::Serialize;

use super::{Lane, ScriptName, StateError, StateStore, WorkerLoad, chunks_or_empty, hex_args};
use protocol::WorkerRole;
use protocol::hashing::BlockHash;
use protocol::index::{GAP_PROBE_BLOCKS, blocks_covered, indexed_positions};

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
    fn map_depths(&mut self, f: impl Fn(usize) -> usize) {
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

const INFO_FIELDS: usize = 12;

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
fn parse_info(script: ScriptName, f: &[String]) -> Result<WorkerInfo, StateError> {
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

impl StateStore {
    /// For each live worker of `model`, how many leading blocks of `chain` it
    /// holds, with its load. Read-only; runs on the routing lane. Long chains
    /// are looked up in chunks (each script call stays near 1 ms); a worker's
    /// count carries into the next chunk only if it held the whole previous
    /// one, and the scan stops once no worker did.
    ///
    /// Only the chain's indexed blocks are looked up (`protocol::index`), and
    /// a match ends at an indexed block: see [`blocks_covered`].
    /// On a sharded model, in the part that routes `chain`.
    pub async fn probe(&self, model: &str, chain: &[BlockHash]) -> Result<PrefixProbe, StateError> {
        let part = self.route_part(model, chain)?;
        let indexed: Vec<BlockHash> = indexed_positions(chain.len()).map(|p| chain[p]).collect();
        let mut probe = self.probe_indexed(&part, &indexed).await?;
        for w in &mut probe.workers {
            w.map_depths(|k| blocks_covered(k, chain.len()));
        }
        Ok(probe)
    }

    /// [`probe`](Self::probe), then, as the routing call does, for the
    /// workers with the deepest match short of the chain's end, the blocks
    /// between their last held indexed block and the next one (at most
    /// [`GAP_PROBE_BLOCKS`] into the chain), for a tip or branch point they
    /// hold: what routing credits each worker with. One extra lookup per
    /// probed block, sent together.
    pub async fn probe_with_gaps(
        &self,
        model: &str,
        chain: &[BlockHash],
    ) -> Result<PrefixProbe, StateError> {
        self.probe_with_gaps_among(model, chain, |_| true).await
    }

    /// [`probe_with_gaps`](Self::probe_with_gaps), with the deepest match
    /// taken among the workers `among` accepts alone: a pick restricted to
    /// some workers (the decode workers of a disaggregated model) matches
    /// them as exactly as the routing call matches the whole fleet. The
    /// others keep their indexed match.
    pub async fn probe_with_gaps_among(
        &self,
        model: &str,
        chain: &[BlockHash],
        among: impl Fn(&WorkerInfo) -> bool,
    ) -> Result<PrefixProbe, StateError> {
        let part = self.route_part(model, chain)?;
        let positions: Vec<usize> = indexed_positions(chain.len()).collect();
        let indexed: Vec<BlockHash> = positions.iter().map(|&p| chain[p]).collect();
        let mut probe = self.probe_indexed(&part, &indexed).await?;
        let held: Vec<usize> = probe.workers.iter().map(|w| w.matched_blocks).collect();
        for w in &mut probe.workers {
            w.map_depths(|k| blocks_covered(k, chain.len()));
        }
        // The deepest match short of the tip: shallower ones cannot reach
        // its floor (route.lua's probe_gaps).
        let Some(k) = (0..held.len())
            .filter(|&i| among(&probe.workers[i].info))
            .map(|i| held[i])
            .filter(|&k| k > 0 && k < positions.len())
            .max()
        else {
            return Ok(probe);
        };
        let waiting: Vec<usize> = (0..held.len())
            .filter(|&i| held[i] == k && among(&probe.workers[i].info))
            .collect();
        let lo = blocks_covered(k, chain.len());
        let hi = positions[k].min(GAP_PROBE_BLOCKS);
        let gap = (lo..hi).map(|q| self.lookup_chunk(&part, &chain[q..=q]));
        let found = futures_util::future::try_join_all(gap).await?;
        // Deepest first: a worker is credited up to the deepest block of
        // the gap it holds.
        for (q, found) in (lo..hi).zip(found).rev() {
            for &i in &waiting {
                let w = &mut probe.workers[i];
                if w.matched_blocks > q {
                    continue;
                }
                let Some(f) = found
                    .workers
                    .iter()
                    .find(|f| f.info.worker_id == w.info.worker_id && f.matched_blocks == 1)
                else {
                    continue;
                };
                // At the gap block's tier, as route.lua's probe_gaps.
                if f.gpu_blocks == 1 && w.gpu_blocks == w.matched_blocks {
                    w.gpu_blocks = q + 1;
                }
                if f.cpu_blocks == 1 && w.cpu_blocks == w.matched_blocks {
                    w.cpu_blocks = q + 1;
                }
                w.matched_blocks = q + 1;
            }
        }
        Ok(probe)
    }

    /// [`probe`](Self::probe) of the indexed blocks themselves: counts them.
    async fn probe_indexed(
        &self,
        model: &str,
        chain: &[BlockHash],
    ) -> Result<PrefixProbe, StateError> {
        let mut chunks = chunks_or_empty(chain, self.limits().lookup_per_call);
        let first = chunks.next().unwrap_or_default();
        let mut result = self.lookup_chunk(model, first).await?;
        let mut full = first.len();
        for chunk in chunks {
            if !result.workers.iter().any(|w| w.matched_blocks == full) {
                break;
            }
            let next = self.lookup_chunk(model, chunk).await?;
            for w in &mut result.workers {
                if w.matched_blocks != full {
                    continue;
                }
                if let Some(n) = next
                    .workers
                    .iter()
                    .find(|n| n.info.worker_id == w.info.worker_id)
                {
                    // A tier's depth goes on only where it reached the
                    // chunk's end (as the match does).
                    if w.gpu_blocks == full {
                        w.gpu_blocks += n.gpu_blocks;
                    }
                    if w.cpu_blocks == full {
                        w.cpu_blocks += n.cpu_blocks;
                    }
                    w.matched_blocks += n.matched_blocks;
                }
            }
            result.scanned_blocks += next.scanned_blocks;
            full += chunk.len();
        }
        Ok(result)
    }

    async fn lookup_chunk(
        &self,
        model: &str,
        chunk: &[BlockHash],
    ) -> Result<PrefixProbe, StateError> {
        const S: ScriptName = ScriptName::Probe;
        let hex = hex_args(chunk);
        let args: Vec<&str> = hex.iter().map(String::as_str).collect();
        let reply: Vec<String> = self.run(Lane::Hot, S, model, &args).await?;
        let (first, rest) = reply
            .split_first()
            .ok_or_else(|| bad_reply(S, "empty reply"))?;
        parse_matches(S, first, rest)
    }

    /// Every incarnation of `model`: live, expired and draining. On a
    /// sharded model, as the first part lists them, with their entries
    /// (`blocks`) summed over the parts.
    pub async fn workers(&self, model: &str) -> Result<Vec<WorkerStatus>, StateError> {
        let parts = self.parts(model)?;
        let mut workers = self.workers_part(model, &parts[0]).await?;
        for part in parts.iter().skip(1) {
            for other in self.workers_part(model, part).await? {
                let same = workers
                    .iter_mut()
                    .find(|w| w.info.worker_id == other.info.worker_id && w.status == other.status);
                if let Some(w) = same {
                    w.info.blocks = match (w.info.blocks, other.info.blocks) {
                        (Some(a), Some(b)) => Some(a + b),
                        (a, b) => a.or(b),
                    };
                }
            }
        }
        Ok(workers)
    }

    async fn workers_part(&self, model: &str, part: &str) -> Result<Vec<WorkerStatus>, StateError> {
        const S: ScriptName = ScriptName::Workers;
        let reply: Vec<String> = self.run(Lane::Bulk, S, part, &[]).await?;
        if !reply.len().is_multiple_of(INFO_FIELDS + 2) {
            return Err(bad_reply(S, format!("{} fields", reply.len())));
        }
        reply
            .chunks(INFO_FIELDS + 2)
            .map(|w| {
                Ok(WorkerStatus {
                    model: model.to_owned(),
                    incarnation: num(S, &w[0])?,
                    status: w[1].clone(),
                    info: parse_info(S, &w[2..])?,
                })
            })
            .collect()
    }
}
