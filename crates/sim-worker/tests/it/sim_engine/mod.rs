//! `sim::Engine`: time model arithmetic, admission, FIFO queueing, aborts
//! and gauges.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::time::Duration;

use protocol::hashing::BlockHash;
use sim_worker::{
    Admission, CacheEvent, Engine, EngineConfig, EngineError, FinishReason, PrefillSharing,
    RequestId, SimRequest, Ticket, TimeModel,
};

mod admission;
mod time_model;

const BS: usize = 4;
const MS: Duration = Duration::from_millis(1);

/// 1 ms per uncached prompt token, 10 µs per cached one, 2 ms overhead,
/// 5 ms per decode step.
fn config(scale: f64, max_num_seqs: usize, num_blocks: usize) -> EngineConfig {
    EngineConfig {
        time: TimeModel {
            prefill_per_token: MS,
            prefill_per_cached_token: Duration::from_micros(10),
            request_overhead: 2 * MS,
            decode_per_token: 5 * MS,
            time_scale: scale,
        },
        family_blocks: 1,
        max_num_seqs,
        num_blocks,
        block_size: BS,
        // Most tests here time one request at a time; serial prefills have
        // their own test.
        prefill: PrefillSharing::Parallel,
    }
}

fn engine(scale: f64, max_num_seqs: usize, num_blocks: usize) -> Engine {
    Engine::new(config(scale, max_num_seqs, num_blocks))
        .unwrap()
        .with_audit()
}

/// A request whose full blocks are hashed `family * 1000 + i`.
fn req(id: u64, family: u64, prompt_tokens: usize, output_tokens: usize) -> SimRequest {
    let full = (prompt_tokens / BS) as u64;
    SimRequest {
        id: RequestId(id),
        block_hashes: (0..full).map(|i| BlockHash(family * 1000 + i)).collect(),
        prompt_tokens,
        output_tokens,
    }
}

fn admitted(t: Result<Ticket, EngineError>) -> Admission {
    match t {
        Ok(Ticket::Admitted(a)) => a,
        other => panic!("expected an admission, got {other:?}"),
    }
}

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
