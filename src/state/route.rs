//! [`StateStore::route`]: match, choose and claim in one atomic call.

use std::time::Duration;

use super::lookup::{bad_reply, num, parse_matches};
use super::ttl::ms;
use super::{Lane, PrefixLookup, ScriptName, StateError, StateStore};
use crate::hashing::BlockHash;

/// Most hashes `route.lua` matches in one call. Matching probes O(log n)
/// blocks, so the bound only caps the argument's size (128 KiB): prompts up
/// to 128k tokens route in one call.
pub const ROUTE_HEAD: usize = 8192;
/// Most unheld blocks `route.lua` claims; the caller claims the rest.
pub const ROUTE_CLAIM: usize = 64;

/// The cache-aware choice's inputs (see `src/routing/cache_aware.rs`).
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
    /// Cost of a full KV cache, in tokens.
    pub kv_pressure_tokens: f64,
    /// KV usage where the pressure starts.
    pub kv_pressure_from: f64,
    /// Worker-reported load older than this is ignored.
    pub stale_load: Duration,
    /// Breaks ties between equal workers.
    pub seed: u32,
}

/// What the atomic routing step decided.
#[derive(Debug, Clone)]
pub struct RouteOutcome {
    /// Every live worker's match of the head and its load.
    pub lookup: PrefixLookup,
    /// Index into `lookup.workers` of the chosen worker, already counted in
    /// flight; `None` when no worker is live.
    pub chosen: Option<usize>,
    /// Leading blocks of the head the chosen worker now holds.
    pub covered: usize,
}

impl StateStore {
    /// Matches `head` (at most [`ROUTE_HEAD`] hashes) against the live workers,
    /// chooses one as the cache-aware policy would, claims up to
    /// [`ROUTE_CLAIM`] of its unheld blocks and counts the request, in one
    /// atomic call. `hints` give, for workers that a read-only lookup found
    /// holding more than the head, how many blocks beyond it they hold.
    pub async fn route(
        &self,
        model: &str,
        head: &[BlockHash],
        params: &RouteParams,
        hints: &[(String, usize)],
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
            hints.len().to_string(),
        ];
        let hint_args: Vec<String> = hints
            .iter()
            .flat_map(|(w, n)| [w.clone(), n.to_string()])
            .collect();
        let packed = packed_chain(head);
        let args: Vec<&str> = fixed
            .iter()
            .chain(&hint_args)
            .chain(std::iter::once(&packed))
            .map(String::as_str)
            .collect();
        let reply: Vec<String> = self.run(Lane::Hot, S, model, &args).await?;
        if reply.len() < 3 {
            return Err(bad_reply(S, "short reply"));
        }
        let chosen: usize = num(S, &reply[1])?;
        let covered: usize = num(S, &reply[2])?;
        let lookup = parse_matches(S, &reply[0], &reply[3..])?;
        Ok(RouteOutcome {
            chosen: chosen.checked_sub(1).filter(|&i| i < lookup.workers.len()),
            covered,
            lookup,
        })
    }
}

/// The chain as one argument: its hashes' 16-hex forms, concatenated, so
/// that the script reads only the blocks it probes.
fn packed_chain(hashes: &[BlockHash]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(hashes.len() * 16);
    for h in hashes {
        let _ = write!(out, "{:016x}", h.0);
    }
    out
}
