//! [`StateStore::route`]: probe, route (choose) and claim in one
//! atomic call of `route.lua`.

use std::time::Duration;

use super::ttl::ms;
use super::views::bad_reply;
use super::{
    InFlight, Lane, PrefixProbe, ScriptName, StateError, StateStore, ViewRecord, WorkerInfo,
    WorkerLoad, WorkerMatch,
};
use protocol::hashing::BlockHash;
use protocol::index::{GAP_PROBE_BLOCKS, INDEX_STRIDE, indexed_positions};

/// Most blocks `route.lua` matches in one call. Matching probes O(log n)
/// indexed blocks, so the bound only caps the argument's size (4 KiB of
/// indexed hashes): prompts up to 128k tokens route in one call.
pub const ROUTE_HEAD: usize = 8192;
/// Most unheld indexed blocks `route.lua` claims (1,024 blocks of prompt);
/// the caller claims the rest.
pub const ROUTE_CLAIM: usize = 64;

/// Requests a worker may always have on top of the proportional load
/// bound, so that an almost idle fleet keeps affinity (with loads 1, 0, 0
/// the bare bound ⌈1.25 × 2 / 3⌉ = 1 would already refuse the first worker).
pub const DEFAULT_LOAD_SLACK: u64 = 2;

/// Worker-reported load older than this is ignored (in-flight still counts).
pub const STALE_LOAD: Duration = Duration::from_secs(10);

/// The cache-aware choice's inputs (see the router's
/// `src/routing/cache_aware.rs`). [`Default`] holds the policy's defaults,
/// the one definition of them: the router's `CacheAwareConfig` starts
/// from it.
#[derive(Debug, Clone, Copy)]
pub struct RouteParams {
    /// Prompt length in tokens.
    pub prompt_tokens: u64,
    /// Tokens per block.
    pub block_size: usize,
    /// Bounded-load ε.
    pub epsilon: f64,
    /// Requests always allowed on top of the bound.
    pub load_slack: u64,
    /// Cost of one queued request, in tokens.
    pub tokens_per_queued_request: f64,
    /// The engines' `max_num_seqs`: requests beyond it wait for a place in
    /// the batch.
    pub max_num_seqs: u64,
    /// Cost of each request in a worker's batch, in tokens.
    pub tokens_per_running_request: f64,
    /// Weight of the request's own uncached tokens.
    pub uncached_weight: f64,
    /// What a token cached on the CPU tier is worth, against one on the GPU
    /// (0 to 1).
    pub cpu_tier_weight: f64,
    /// What a token cached on disk is worth, against one on the GPU (0 to 1).
    pub disk_tier_weight: f64,
    /// Cost of a full KV cache, in tokens.
    pub kv_pressure_tokens: f64,
    /// KV usage where the pressure starts.
    pub kv_pressure_from: f64,
    /// Worker-reported load older than this is ignored.
    pub stale_load: Duration,
    /// Breaks ties between equal workers.
    pub seed: u32,
}

impl Default for RouteParams {
    /// The cache-aware policy's default weights, for an empty prompt of
    /// 16-token blocks and seed 0.
    fn default() -> Self {
        RouteParams {
            prompt_tokens: 0,
            block_size: 16,
            epsilon: 0.25,
            load_slack: DEFAULT_LOAD_SLACK,
            tokens_per_queued_request: 512.0,
            max_num_seqs: 256,
            tokens_per_running_request: 16.0,
            uncached_weight: 3.0,
            cpu_tier_weight: 0.5,
            disk_tier_weight: 0.25,
            kv_pressure_tokens: 2048.0,
            kv_pressure_from: 0.9,
            stale_load: STALE_LOAD,
            seed: 0,
        }
    }
}

impl RouteParams {
    /// The default weights for a prompt of `prompt_tokens` in blocks of
    /// `block_size` tokens, breaking ties with `seed`.
    pub fn new(prompt_tokens: u64, block_size: usize, seed: u32) -> Self {
        RouteParams {
            prompt_tokens,
            block_size,
            seed,
            ..RouteParams::default()
        }
    }
}

/// What the atomic routing step decided.
#[derive(Debug, Clone)]
pub struct RouteOutcome {
    /// Every live worker's match of the head and its load.
    pub lookup: PrefixProbe,
    /// Index into `lookup.workers` of the chosen worker, already counted in
    /// flight; `None` when no worker is live.
    pub chosen: Option<usize>,
    /// Leading blocks of the head the chosen worker now holds.
    pub covered: usize,
    /// Prompt tokens counted as the chosen worker's prefill (this router
    /// takes them off at the response's first byte).
    pub prefill_tokens: u64,
    /// The first block of the chain left unclaimed for the chosen worker
    /// (by [`route`](StateStore::route): `covered`; by
    /// [`route_chain`](StateStore::route_chain), past the chosen worker's
    /// whole match, at most the chain's length): the caller claims the
    /// rest off the request's critical path
    /// ([`claim_prefix`](StateStore::claim_prefix)).
    pub tail_from: usize,
}

impl StateStore {
    /// The routing decision for a whole chain, in one call: when the
    /// chain is longer than [`ROUTE_HEAD`], a read-only probe finds how far
    /// the workers holding the whole head go; [`route`](Self::route)
    /// chooses among the live workers (those `allowed` names, when it names
    /// any), claims the head for the chosen worker and counts the request.
    /// The outcome's workers carry their whole match (beyond the head, on
    /// the tier of the head's last block, as `route.lua` weighs it), and
    /// [`RouteOutcome::tail_from`] says what is left to claim.
    pub async fn route_chain(
        &self,
        model: &str,
        chain: &[BlockHash],
        params: &RouteParams,
        allowed: &[String],
    ) -> Result<RouteOutcome, StateError> {
        let head = chain.len().min(ROUTE_HEAD);
        let hints: Vec<(String, usize)> = if chain.len() > ROUTE_HEAD {
            let full = self.probe(model, chain).await?;
            full.workers
                .iter()
                .filter(|w| w.matched_blocks > head)
                .map(|w| (w.info.worker_id.clone(), w.matched_blocks - head))
                .collect()
        } else {
            Vec::new()
        };
        let mut outcome = self
            .route(model, &chain[..head], params, &hints, allowed)
            .await?;
        for w in &mut outcome.lookup.workers {
            let extra = hints.iter().find(|(id, _)| *id == w.info.worker_id);
            if let (true, Some((_, extra))) = (w.matched_blocks == head, extra) {
                w.extend_on_last_tier(*extra);
            }
        }
        let chosen_depth = outcome
            .chosen
            .and_then(|i| outcome.lookup.workers.get(i))
            .map_or(chain.len(), |w| w.matched_blocks);
        outcome.tail_from = outcome.covered.max(chosen_depth).min(chain.len());
        Ok(outcome)
    }

    /// Matches `head` (at most [`ROUTE_HEAD`] hashes; its indexed blocks, see
    /// `protocol::index`) against the live workers, chooses one as the
    /// cache-aware policy would (only among the workers named in `allowed`,
    /// all when it is empty; the probe still lists every live worker),
    /// claims up to [`ROUTE_CLAIM`] of its unheld indexed blocks and counts
    /// the request, in one atomic call (`route.lua`). `hints` give, for
    /// workers that a read-only probe found holding more than the head, how
    /// many blocks beyond it they hold.
    pub async fn route(
        &self,
        model: &str,
        head: &[BlockHash],
        params: &RouteParams,
        hints: &[(String, usize)],
        allowed: &[String],
    ) -> Result<RouteOutcome, StateError> {
        const S: ScriptName = ScriptName::Route;
        let head = &head[..head.len().min(ROUTE_HEAD)];
        let fixed = [
            self.router_id().to_owned(),
            ms(self.ttls().speculative),
            params.prompt_tokens.to_string(),
            params.block_size.to_string(),
            params.epsilon.to_string(),
            params.tokens_per_queued_request.to_string(),
            params.kv_pressure_tokens.to_string(),
            params.kv_pressure_from.to_string(),
            ms(params.stale_load),
            params.seed.to_string(),
            ROUTE_CLAIM.to_string(),
            params.load_slack.to_string(),
            INDEX_STRIDE.to_string(),
            head.len().to_string(),
            params.max_num_seqs.to_string(),
            params.tokens_per_running_request.to_string(),
            params.uncached_weight.to_string(),
            params.cpu_tier_weight.to_string(),
            params.disk_tier_weight.to_string(),
            hints.len().to_string(),
        ];
        let hint_args: Vec<String> = hints
            .iter()
            .flat_map(|(w, n)| [w.clone(), n.to_string()])
            .chain(std::iter::once(allowed.len().to_string()))
            .chain(allowed.iter().cloned())
            .collect();
        let indexed = packed_chain(head);
        let first = packed(&head[..head.len().min(GAP_PROBE_BLOCKS)]);
        let args: Vec<&[u8]> = fixed
            .iter()
            .chain(&hint_args)
            .map(String::as_bytes)
            .chain([indexed.as_slice(), first.as_slice()])
            .collect();
        let part = self.route_part(model, head)?;
        let reply: Vec<redis::Value> = self.run_bytes(Lane::Hot, S, &part, &args).await?;
        let outcome = parse_reply(&reply)?;
        if let Some(w) = outcome.chosen.and_then(|i| outcome.lookup.workers.get(i)) {
            let delta = InFlight {
                requests: 1,
                prefill_tokens: i64::try_from(outcome.prefill_tokens).unwrap_or(i64::MAX),
            };
            self.inner.ledger.add(&part, &w.info.worker_id, delta);
            // The other parts of a sharded model count it too, batched
            // (fan_out): their routes weigh this worker's load a moment later.
            self.count_in_other_parts(model, &part, &w.info.worker_id, delta)
                .await?;
        }
        Ok(outcome)
    }
}

/// The chain's indexed blocks as one argument (see [`packed`]).
fn packed_chain(hashes: &[BlockHash]) -> Vec<u8> {
    packed(indexed_positions(hashes.len()).map(|p| &hashes[p]))
}

/// Hashes as one argument: 8 big-endian bytes each, concatenated (half the
/// bytes of hex; the script reads only the blocks it probes or claims).
fn packed<'a>(hashes: impl IntoIterator<Item = &'a BlockHash>) -> Vec<u8> {
    hashes.into_iter().flat_map(|h| h.0.to_be_bytes()).collect()
}

const HEADER: usize = 5;
const PER_WORKER: usize = 6;

/// Decodes {probes, chosen, covered, now, prefill tokens counted, then per
/// worker: matched, GPU blocks, CPU-or-GPU blocks, in flight, their prefill
/// tokens, view record}.
fn parse_reply(reply: &[redis::Value]) -> Result<RouteOutcome, StateError> {
    const S: ScriptName = ScriptName::Route;
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => Ok(*n),
        other => Err(bad_reply(S, format!("not an integer: {other:?}"))),
    };
    if reply.len() < HEADER || !(reply.len() - HEADER).is_multiple_of(PER_WORKER) {
        return Err(bad_reply(S, format!("{} values", reply.len())));
    }
    let now = int(&reply[3])?;
    let workers = reply[HEADER..]
        .chunks(PER_WORKER)
        .map(|w| {
            let redis::Value::BulkString(raw) = &w[5] else {
                return Err(bad_reply(S, "a view record is not a string"));
            };
            let rec =
                ViewRecord::decode(raw).ok_or_else(|| bad_reply(S, "malformed view record"))?;
            let blocks = |v: &redis::Value| {
                usize::try_from(int(v)?).map_err(|_| bad_reply(S, "negative match"))
            };
            Ok(WorkerMatch {
                matched_blocks: blocks(&w[0])?,
                gpu_blocks: blocks(&w[1])?,
                cpu_blocks: blocks(&w[2])?,
                info: worker_info(
                    &rec,
                    u64::try_from(int(&w[3])?).unwrap_or(0),
                    u64::try_from(int(&w[4])?).unwrap_or(0),
                    now,
                ),
            })
        })
        .collect::<Result<Vec<_>, StateError>>()?;
    let chosen = usize::try_from(int(&reply[1])?).unwrap_or(0);
    let covered = usize::try_from(int(&reply[2])?).unwrap_or(0);
    Ok(RouteOutcome {
        chosen: chosen.checked_sub(1).filter(|&i| i < workers.len()),
        covered,
        tail_from: covered,
        prefill_tokens: u64::try_from(int(&reply[4])?).unwrap_or(0),
        lookup: PrefixProbe {
            scanned_blocks: usize::try_from(int(&reply[0])?).unwrap_or(0),
            workers,
        },
    })
}

/// A routing reply's worker, as the read-only lookups report it (without
/// the block count, which routing does not read).
fn worker_info(rec: &ViewRecord, in_flight: u64, prefill_tokens: u64, now: i64) -> WorkerInfo {
    let count = |x: Option<f64>| x.map_or(0, |x| x as u64);
    WorkerInfo {
        worker_id: rec.id.clone(),
        url: rec.url.clone(),
        in_flight,
        prefill_tokens,
        load: WorkerLoad {
            num_requests_waiting: count(rec.waiting),
            num_requests_running: count(rec.running),
            kv_cache_usage_perc: rec.kv_usage.unwrap_or(0.0),
        },
        load_age: rec
            .load_ms
            .and_then(|at| u64::try_from(now - at as i64).ok())
            .map(Duration::from_millis),
        lease_left_ms: rec.lease_until_ms.map_or(-1, |l| l as i64 - now),
        blocks: None,
        syncing: rec.syncing,
        role: rec.role,
    }
}
