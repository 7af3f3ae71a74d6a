//! [`Sharding`]: one model's state split into virtual shards, each a
//! complete copy of the key schema under its own hash tag, so that a Valkey
//! Cluster spreads the model while every script still touches one slot.
//!
//! A shard is a **part** of the model: its keys are `<ns>:{<model>#<k>}:…`
//! (`<ns>:{<model>}:…` when there is one shard, as before sharding). Blocks
//! go to their family's part (`protocol::family`); whatever concerns a
//! worker as a whole (heartbeats, load, drains, in-flight counts, router
//! leases, gc) goes to every part. Each part therefore carries its own
//! incarnations, leases and routing view, and routes on its own.
//! `<k>` is chosen so that part `s` of `n` hashes into the `s`-th of `n`
//! equal slot ranges: a cluster whose primaries own equal ranges (as
//! `valkey-cli --cluster create` assigns them) gets the same number of
//! parts on each.

use std::collections::HashMap;
use std::sync::Arc;

use protocol::family::{DEFAULT_FAMILY_BLOCKS, MAX_SHARDS, block_shards, route_shard};
use protocol::hashing::BlockHash;

use super::route_claim::ROUTE_HEAD;
use super::{StateError, StateStore};

/// How a model's state is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharding {
    /// Parts per model (1: no split).
    pub shards: usize,
    /// Family depth in blocks (`protocol::family`).
    pub family_blocks: usize,
}

impl Default for Sharding {
    fn default() -> Self {
        Sharding {
            shards: 1,
            family_blocks: DEFAULT_FAMILY_BLOCKS,
        }
    }
}

impl Sharding {
    /// Checks the bounds: 1 to 256 shards, a family depth of 1 to the
    /// blocks one routing call matches.
    pub fn check(&self) -> Result<(), StateError> {
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(StateError::Invalid {
                what: "shards",
                detail: format!("must be 1 to {MAX_SHARDS}, got {}", self.shards),
            });
        }
        if !(1..=ROUTE_HEAD).contains(&self.family_blocks) {
            return Err(StateError::Invalid {
                what: "family blocks",
                detail: format!("must be 1 to {ROUTE_HEAD}, got {}", self.family_blocks),
            });
        }
        Ok(())
    }
}

/// Cluster hash slots.
const SLOTS: usize = 16384;

/// The cluster slot of a hash tag (CRC16/XMODEM, as Valkey computes it).
pub fn key_slot(tag: &[u8]) -> usize {
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    usize::from(crc) % SLOTS
}

/// The part names of `model` split `shards` ways: `model` itself for one,
/// else `<model>#<k>` with part `s` in the `s`-th slot range.
pub fn part_names(model: &str, shards: usize) -> Vec<String> {
    if shards <= 1 {
        return vec![model.to_owned()];
    }
    let mut parts: Vec<Option<String>> = vec![None; shards];
    let mut missing = shards;
    // Each candidate lands in a given range with probability 1/shards, so
    // this ends after about shards × ln(shards) candidates.
    for k in 0u64.. {
        let name = format!("{model}#{k}");
        let s = key_slot(name.as_bytes()) * shards / SLOTS;
        if parts[s].is_none() {
            parts[s] = Some(name);
            missing -= 1;
            if missing == 0 {
                break;
            }
        }
    }
    parts.into_iter().flatten().collect()
}

/// The model a part's name belongs to: `m` for `m#7`, else the name
/// itself.
pub fn part_model(name: &str) -> &str {
    match name.rsplit_once('#') {
        Some((base, k))
            if !base.is_empty() && !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) =>
        {
            base
        }
        _ => name,
    }
}

/// Part names per model, computed once.
#[derive(Debug, Default)]
pub(crate) struct PartNames {
    by_model: std::sync::Mutex<HashMap<String, Arc<[String]>>>,
}

/// A batch of blocks split by part: (part index, its blocks).
pub(crate) type Split = Vec<(usize, Vec<BlockHash>)>;

impl StateStore {
    /// The sharding this store applies.
    pub fn sharding(&self) -> Sharding {
        *self
            .inner
            .sharding
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the sharding (before the first call; every router and worker of
    /// a fleet must agree on it).
    pub fn set_sharding(&self, sharding: Sharding) -> Result<(), StateError> {
        sharding.check()?;
        *self
            .inner
            .sharding
            .write()
            .unwrap_or_else(|p| p.into_inner()) = sharding;
        self.inner
            .parts
            .by_model
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        Ok(())
    }

    /// The parts of `model`, checking its name.
    pub(crate) fn parts(&self, model: &str) -> Result<Arc<[String]>, StateError> {
        protocol::check_name("model", model)?;
        let shards = self.sharding().shards;
        let mut map = self
            .inner
            .parts
            .by_model
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(p) = map.get(model) {
            return Ok(p.clone());
        }
        let parts: Arc<[String]> = part_names(model, shards).into();
        if map.len() >= 4096 {
            map.clear();
        }
        map.insert(model.to_owned(), parts.clone());
        Ok(parts)
    }

    /// The part that routes `chain` (its family's).
    pub(crate) fn route_part(
        &self,
        model: &str,
        chain: &[BlockHash],
    ) -> Result<String, StateError> {
        let parts = self.parts(model)?;
        let s = self.sharding();
        Ok(parts[route_shard(chain, s.family_blocks, parts.len())].clone())
    }

    /// `hashes` split by the part they belong to. Without families (or with
    /// a list of another length) every block goes to every part.
    pub(crate) fn split(
        &self,
        shards: usize,
        hashes: &[BlockHash],
        families: Option<&[Option<BlockHash>]>,
    ) -> Split {
        if shards <= 1 {
            return vec![(0, hashes.to_vec())];
        }
        let Some(families) = families.filter(|f| f.len() == hashes.len()) else {
            return (0..shards).map(|s| (s, hashes.to_vec())).collect();
        };
        let mut out: Vec<Vec<BlockHash>> = vec![Vec::new(); shards];
        for (&h, &f) in hashes.iter().zip(families) {
            for s in block_shards(f, shards) {
                out[s].push(h);
            }
        }
        out.into_iter().enumerate().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_valkey() {
        // CLUSTER KEYSLOT answers, from the Valkey documentation's examples.
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 0x31c3);
    }

    #[test]
    fn a_part_names_its_model() {
        assert_eq!(part_model("Qwen/Qwen3-8B#12"), "Qwen/Qwen3-8B");
        assert_eq!(part_model("m"), "m");
        assert_eq!(part_model("m#"), "m#");
        assert_eq!(part_model("#3"), "#3");
        assert_eq!(part_model("m#x1"), "m#x1");
    }

    #[test]
    fn parts_spread_over_equal_slot_ranges() {
        assert_eq!(part_names("m", 1), ["m"]);
        for n in [2, 3, 6, 12] {
            let parts = part_names("Qwen/Qwen3-8B", n);
            assert_eq!(parts.len(), n);
            for (s, p) in parts.iter().enumerate() {
                assert!(p.starts_with("Qwen/Qwen3-8B#"));
                assert_eq!(key_slot(p.as_bytes()) * n / SLOTS, s, "{p}");
            }
        }
    }
}
