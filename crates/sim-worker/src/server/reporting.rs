//! [`Reporters`]: where the simulated engine's cache events go: the fleet's
//! push API (through a [`PusherHandle`]) and vLLM's KV-event stream
//! (through a [`KvEventPublisher`]), each optional, with the fault switches
//! that silence them or lose evictions.

use std::time::{SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::book::TokenBook;
use crate::{CacheEvent, Medium, TierEvent};
use protocol::hashing::BlockHash;
use protocol::kv_events::{BlockRemoved, BlockStored, EngineHash, KvEvent, KvEventBatch};
use worker::kv_events::KvEventPublisher;
use worker::push::PusherHandle;

/// The reporters of one simulated engine and their fault switches. The
/// pusher applies its own switches; the KV stream's are kept here.
pub struct Reporters {
    /// The fleet pusher's handle.
    pub pusher: Option<PusherHandle>,
    /// The KV-event publisher.
    pub kv: Option<KvEventPublisher>,
    /// Report nothing of the CPU tier (an LMCache tier, which vLLM's KV
    /// events do not show: its controller reports it instead).
    pub hide_cpu_tier: bool,
    kv_stopped: bool,
    kv_drop_evictions: f64,
    kv_lose_batches: f64,
    rng: StdRng,
}

impl Reporters {
    /// No reporter yet; `seed` drives the KV stream's eviction drops.
    pub fn new(seed: u64) -> Self {
        Reporters {
            pusher: None,
            kv: None,
            hide_cpu_tier: false,
            kv_stopped: false,
            kv_drop_evictions: 0.0,
            kv_lose_batches: 0.0,
            rng: StdRng::seed_from_u64(seed ^ 0x6b76_6576),
        }
    }

    /// Stops (or resumes) every report: the pusher pauses (its lease runs
    /// out) and KV events are no longer published.
    pub fn set_stopped(&mut self, stopped: bool) {
        self.kv_stopped = stopped;
        if let Some(p) = &self.pusher {
            p.set_paused(stopped);
        }
    }

    /// Loses each evicted hash with probability `p`, in both reporters.
    pub fn set_drop_evictions(&mut self, p: f64) {
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        self.kv_drop_evictions = p;
        if let Some(pusher) = &self.pusher {
            pusher.set_drop_evictions(p);
        }
    }

    /// Loses each KV-event batch with probability `p`: numbered and kept
    /// for replay, not sent (a sequence gap the reporter must fill).
    pub fn set_lose_kv_batches(&mut self, p: f64) {
        self.kv_lose_batches = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
    }

    /// The KV-batch loss probability in force.
    pub fn lose_kv_batches(&self) -> f64 {
        self.kv_lose_batches
    }

    /// Whether reporting is stopped.
    pub fn stopped(&self) -> bool {
        self.kv_stopped
    }

    /// The eviction-drop probability in force.
    pub fn drop_evictions(&self) -> f64 {
        self.kv_drop_evictions
    }

    /// Hands `events` to both reporters, in order. The push reports carry
    /// tiers: a move's CPU store pushes its indexed blocks as stored on the
    /// CPU tier (the worker still holds them), a commit's as on the GPU.
    pub fn publish(&mut self, events: &[TierEvent], book: &TokenBook) {
        let hide = self.hide_cpu_tier;
        let events: Vec<&TierEvent> = events
            .iter()
            .filter(|e| !(hide && e.medium == Medium::Cpu))
            .collect();
        if let Some(p) = &self.pusher {
            for TierEvent { event, .. } in events.iter().copied() {
                match event {
                    CacheEvent::Stored { indexed, .. } => p.stored(indexed),
                    CacheEvent::Removed { indexed, .. } => p.evicted(indexed),
                    CacheEvent::Cleared => p.cleared(),
                }
            }
        }
        if self.kv_stopped || self.kv.is_none() {
            return;
        }
        let kv_events: Vec<KvEvent> = events
            .into_iter()
            .filter_map(|e| match e.medium {
                Medium::Gpu => self.kv_event(&e.event, book),
                Medium::Cpu => self.cpu_kv_event(&e.event),
            })
            .collect();
        if kv_events.is_empty() {
            return;
        }
        let batch = KvEventBatch {
            ts: unix_seconds(),
            events: kv_events,
            data_parallel_rank: None,
            extra_fields: 0,
        };
        let lose = self.kv_lose_batches > 0.0 && self.rng.random_bool(self.kv_lose_batches);
        if let Some(kv) = &self.kv
            && let Err(e) = if lose {
                kv.publish_lost(batch)
            } else {
                kv.publish(batch)
            }
        {
            tracing::warn!(error = %e, "KV-event batch not published");
        }
    }

    /// One CPU-tier event as vLLM's offloading connector publishes it
    /// (`OffloadingConnectorScheduler.take_events`): `medium` `"CPU"`, no
    /// parent, no tokens, no LoRA, no group. Its lost evictions are drawn
    /// as the GPU pool's are.
    fn cpu_kv_event(&mut self, event: &CacheEvent) -> Option<KvEvent> {
        match event {
            CacheEvent::Stored {
                hashes, block_size, ..
            } => Some(KvEvent::BlockStored(BlockStored {
                block_hashes: hashes.iter().map(|&h| EngineHash::from(h)).collect(),
                block_size: u32::try_from(*block_size).unwrap_or(u32::MAX),
                medium: Some(Medium::Cpu.as_str().into()),
                ..BlockStored::default()
            })),
            CacheEvent::Removed { hashes, .. } => self.removed(hashes, Medium::Cpu, None),
            CacheEvent::Cleared => None,
        }
    }

    /// A `BlockRemoved` on `medium` of the evicted hashes the drop-evictions
    /// fault lets through (none when it drops them all).
    fn removed(
        &mut self,
        hashes: &[BlockHash],
        medium: Medium,
        group_idx: Option<i64>,
    ) -> Option<KvEvent> {
        let kept = self.kept_evictions(hashes);
        (!kept.is_empty()).then(|| {
            KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: kept,
                medium: Some(medium.as_str().into()),
                group_idx,
                ..BlockRemoved::default()
            })
        })
    }

    /// The evicted hashes the drop-evictions fault lets through.
    fn kept_evictions(&mut self, hashes: &[BlockHash]) -> Vec<EngineHash> {
        let p = self.kv_drop_evictions;
        hashes
            .iter()
            .filter(|_| p <= 0.0 || !self.rng.random_bool(p))
            .map(|&h| EngineHash::from(h))
            .collect()
    }

    /// One cache event as vLLM 0.33 publishes it from its GPU block pool.
    fn kv_event(&mut self, event: &CacheEvent, book: &TokenBook) -> Option<KvEvent> {
        match event {
            CacheEvent::Stored {
                hashes,
                parent,
                block_size,
                ..
            } => {
                let token_ids = book.tokens(hashes).unwrap_or_else(|| {
                    tracing::warn!("tokens of stored blocks unknown; event sent without them");
                    Vec::new()
                });
                Some(KvEvent::BlockStored(BlockStored {
                    block_hashes: hashes.iter().map(|&h| EngineHash::from(h)).collect(),
                    parent_block_hash: parent.map(EngineHash::from),
                    token_ids,
                    block_size: u32::try_from(*block_size).unwrap_or(u32::MAX),
                    medium: Some(Medium::Gpu.as_str().into()),
                    extra_keys: Some(vec![rmpv::Value::Nil; hashes.len()]),
                    group_idx: Some(0),
                    kv_cache_spec_kind: Some("full_attention".into()),
                    ..BlockStored::default()
                }))
            }
            CacheEvent::Removed { hashes, .. } => self.removed(hashes, Medium::Gpu, Some(0)),
            CacheEvent::Cleared => Some(KvEvent::AllBlocksCleared),
        }
    }
}

fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
