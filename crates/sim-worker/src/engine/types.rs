//! The values the [`Engine`](super::Engine) takes and reports, its
//! configuration and its errors.

use std::time::Duration;

use crate::RequestId;
use crate::cache::CacheError;
use crate::timing::{TimeModel, TimeModelError};
use crate::transfer::{KvTransferModel, TransferModelError};
use protocol::hashing::{BlockHash, DEFAULT_BLOCK_SIZE};

/// One request as the engine sees it: what it costs, not what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRequest {
    /// Unique among running and waiting requests.
    pub id: RequestId,
    /// The chained hashes of the prompt's full blocks, in order (a
    /// trailing partial block has none). May be shorter than the number of
    /// full blocks: unhashed blocks are never cached.
    pub block_hashes: Vec<BlockHash>,
    /// Prompt length in tokens (at least 1).
    pub prompt_tokens: usize,
    /// Tokens to generate (at least 1).
    pub output_tokens: usize,
}

/// A running request's schedule, fixed at admission. Times are on the
/// engine's clock (a [`Duration`] since the caller's epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The request.
    pub id: RequestId,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub output_tokens: usize,
    /// Prompt tokens served from the prefix cache (matched blocks × block
    /// size, at most the prompt minus its last token, as vLLM reports in
    /// `usage.prompt_tokens_details.cached_tokens`).
    pub cached_tokens: usize,
    /// Prompt tokens loaded from the CPU tier instead of computed (0
    /// without a CPU tier), within the same bound as `cached_tokens`.
    pub cpu_tokens: usize,
    /// Prompt tokens whose KV a remote prefill computed and this engine
    /// pulled ([`KvSource::RemotePrefill`]; else 0): the prompt but for the
    /// local and CPU hits and the last token, which is recomputed.
    pub remote_tokens: usize,
    /// When the request was submitted.
    pub submitted_at: Duration,
    /// When it got a slot and its blocks.
    pub admitted_at: Duration,
    /// When its prefill completes and the first token is out.
    pub first_token_at: Duration,
    /// When its last token is out and its blocks are freed.
    pub done_at: Duration,
}

impl Admission {
    /// Time spent in the waiting queue.
    pub fn queue_wait(&self) -> Duration {
        self.admitted_at.saturating_sub(self.submitted_at)
    }

    /// From admission to the first token: the prefill, and with serial
    /// prefills the wait for those admitted before it.
    pub fn prefill_time(&self) -> Duration {
        self.first_token_at.saturating_sub(self.admitted_at)
    }

    /// Time to first token: queue wait + prefill.
    pub fn ttft(&self) -> Duration {
        self.first_token_at.saturating_sub(self.submitted_at)
    }

    /// End-to-end latency: submission to last token.
    pub fn e2e(&self) -> Duration {
        self.done_at.saturating_sub(self.submitted_at)
    }

    /// Prompt tokens that had to be computed.
    pub fn uncached_tokens(&self) -> usize {
        self.prompt_tokens - self.cached_tokens - self.cpu_tokens - self.remote_tokens
    }

    /// The prompt tokens vLLM reports in `usage.prompt_tokens_details.
    /// cached_tokens`: every token it did not compute, the local prefix
    /// cache's, the CPU tier's and a remote prefill's (vLLM's scheduler
    /// counts `num_computed_tokens` at the first schedule, external tokens
    /// included). Equals `cached_tokens` without tiers or transfers.
    pub fn reported_cached_tokens(&self) -> usize {
        self.cached_tokens + self.cpu_tokens + self.remote_tokens
    }

    /// When output token `index` (0-based) is out, for streaming: evenly
    /// spaced from `first_token_at` (index 0) to `done_at` (the last index
    /// and beyond).
    pub fn token_at(&self, index: usize) -> Duration {
        let last = self.output_tokens.saturating_sub(1);
        if index >= last {
            return self.done_at;
        }
        let span = self.done_at.saturating_sub(self.first_token_at).as_nanos();
        let offset = span * index as u128 / last as u128;
        // offset < span <= u64::MAX nanoseconds, so this cannot saturate.
        self.first_token_at.saturating_add(Duration::from_nanos(
            u64::try_from(offset).unwrap_or(u64::MAX),
        ))
    }
}

/// Where a request's prompt KV comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvSource {
    /// Computed here (from the prefix cache and CPU tier as far as they
    /// reach): a colocated request, or a prefill worker's.
    #[default]
    Local,
    /// Computed by a remote prefill worker and pulled from it (a decode
    /// worker's request with `do_remote_prefill`): the blocks this engine
    /// does not hold are transferred, only the last token is computed.
    RemotePrefill,
}

/// What [`Engine::submit`](super::Engine::submit) did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ticket {
    /// Running now, with this schedule.
    Admitted(Admission),
    /// Waiting behind `position` earlier requests; its admission will come
    /// from [`Engine::take_admitted`](super::Engine::take_admitted).
    Queued {
        /// 0-based place in the waiting queue.
        position: usize,
    },
}

/// How a request left the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// All its tokens were generated.
    Completed,
    /// Ended early by [`Engine::abort`](super::Engine::abort).
    Aborted,
}

/// A request that left the engine, for reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// The request.
    pub id: RequestId,
    /// Completed or aborted.
    pub reason: FinishReason,
    /// When it was submitted.
    pub submitted_at: Duration,
    /// When it left (its `done_at` if completed).
    pub finished_at: Duration,
    /// Its schedule, if it was ever admitted.
    pub admission: Option<Admission>,
}

/// The load gauges vLLM exports on `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gauges {
    /// `vllm:num_requests_running`.
    pub num_requests_running: usize,
    /// `vllm:num_requests_waiting`.
    pub num_requests_waiting: usize,
    /// `vllm:kv_cache_usage_perc`: pinned blocks / capacity, in 0..=1.
    pub kv_cache_usage_perc: f64,
}

/// Totals since the engine started, for counters and hit rates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// Requests accepted by `submit` (refused ones are not counted).
    pub submitted: u64,
    /// Requests admitted to run.
    pub admitted: u64,
    /// Requests that completed.
    pub completed: u64,
    /// Requests aborted, waiting or running.
    pub aborted: u64,
    /// Prompt tokens of admitted requests (`vllm:prefix_cache_queries`).
    pub prompt_tokens: u64,
    /// Of those, served from the cache (`vllm:prefix_cache_hits`).
    pub cached_tokens: u64,
    /// Of those, loaded from the CPU tier.
    pub cpu_hit_tokens: u64,
    /// Requests whose prompt KV came from a remote prefill.
    pub remote_prefills: u64,
    /// Prompt tokens pulled from remote prefills.
    pub remote_tokens: u64,
}

/// The simulated replica's shape and speed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineConfig {
    /// Prefill and decode costs, and the time scale.
    pub time: TimeModel,
    /// Most requests running at once (vLLM's `--max-num-seqs`).
    pub max_num_seqs: usize,
    /// KV blocks in the pool (vLLM's `num_gpu_blocks`).
    pub num_blocks: usize,
    /// Tokens per block (vLLM's `--block-size`).
    pub block_size: usize,
    /// Prefix family depth of the blocks it reports (`protocol::family`).
    pub family_blocks: usize,
    /// Whether running requests share the engine's prefill compute.
    pub prefill: PrefillSharing,
}

/// How the prefills of running requests share the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefillSharing {
    /// One after another, in admission order, each at the full rate: a GPU
    /// is busy with one prefill's tokens at a time (vLLM's chunked prefill
    /// fills each step's token budget first come, first served), so a new
    /// request's first token waits for the uncached tokens admitted before
    /// it. Decodes do not slow prefills. The default: one GPU's compute,
    /// shared (docs/sim-worker.md, "Shared compute").
    #[default]
    Serial,
    /// Each independently, as if every running request had the GPU to
    /// itself (only `max_num_seqs` bounds concurrency): no queue between
    /// prefills, for tests that want none.
    Parallel,
}

impl Default for EngineConfig {
    /// vLLM's defaults for the batch and block size; 8192 blocks of 16
    /// tokens (131k tokens of KV); the default [`TimeModel`].
    fn default() -> Self {
        EngineConfig {
            time: TimeModel::default(),
            max_num_seqs: 256,
            num_blocks: 8192,
            block_size: DEFAULT_BLOCK_SIZE,
            family_blocks: protocol::family::DEFAULT_FAMILY_BLOCKS,
            prefill: PrefillSharing::default(),
        }
    }
}

/// The KV tiers and transfers of a simulated replica, beyond the GPU pool
/// ([`Engine::set_tiers`](super::Engine::set_tiers)). The default, no CPU
/// tier, changes nothing of a colocated engine.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Tiers {
    /// Blocks of the CPU offload tier (0: none).
    pub cpu_blocks: usize,
    /// KV size and the bandwidths of remote and CPU transfers.
    pub transfer: KvTransferModel,
}

/// Why the engine refused a configuration, request or call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// `max_num_seqs` of zero.
    #[error("invalid engine configuration: {0}")]
    InvalidConfig(&'static str),
    /// An unusable time model.
    #[error(transparent)]
    TimeModel(#[from] TimeModelError),
    /// An unusable transfer model.
    #[error(transparent)]
    Transfer(#[from] TransferModelError),
    /// An unusable cache configuration.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The id is already running or waiting.
    #[error("request {0} is already running or waiting")]
    DuplicateRequest(RequestId),
    /// The id is neither running nor waiting (perhaps already finished).
    #[error("request {0} is neither running nor waiting")]
    UnknownRequest(RequestId),
    /// A request that makes no sense.
    #[error("request {id} is invalid: {reason}")]
    InvalidRequest {
        /// The request.
        id: RequestId,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A request needing more KV blocks than the pool has: it could never
    /// run (vLLM rejects prompts longer than `max_model_len`).
    #[error("request {id} needs {blocks} blocks but the pool has {capacity}")]
    TooLarge {
        /// The request.
        id: RequestId,
        /// Blocks it needs.
        blocks: usize,
        /// The pool's capacity.
        capacity: usize,
    },
}
