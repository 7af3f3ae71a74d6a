//! Read-only probes: which worker holds how much of a chain (per tier, in
//! chunks for long chains, with gaps found between indexed blocks), and
//! the worker listing. Their types and reply parsing are in `views`.

use super::views::{
    INFO_FIELDS, PrefixProbe, WorkerInfo, WorkerStatus, bad_reply, num, parse_info, parse_matches,
};
use super::{Lane, ScriptName, StateError, StateStore, chunks_or_empty, hex_args};
use protocol::hashing::BlockHash;
use protocol::index::{GAP_PROBE_BLOCKS, blocks_covered, indexed_positions};

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
