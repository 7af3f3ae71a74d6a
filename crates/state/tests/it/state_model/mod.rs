//! Property test: random sequences of state operations against a real
//! valkey-server and a tiny in-memory model; after every step the forward and
//! reverse maps must agree with each other and with the model, entry kinds
//! (speculative, confirmed on the GPU, CPU or disk) included, and each
//! worker's digests with its confirmed blocks and their tiers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use protocol::Tier;
use protocol::hashing::BlockHash;
use protocol::index::{digests_hex, tiered_digests};
use state::{
    BatchLimits, ConnectionSettings, ScriptName, StateError, StateStore, StateTtls, WorkerHeartbeat,
};
use support::{Valkey, raw_state};

mod harness;
mod sequences;
use harness::*;
const PREFIX: &str = "pt";
const WORKERS: [&str; 3] = ["w0", "w1", "w2"];

/// A universe of 12 hashes; groups of 4 share a forward bucket.
fn universe() -> Vec<BlockHash> {
    (0..12u64)
        .map(|i| BlockHash(((0xab00 + (i / 4)) << 48) | (i * 7919)))
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Heartbeat(usize),
    Claim(usize, Vec<usize>),
    Stored(usize, Vec<usize>, Tier),
    Evict(usize, Vec<usize>),
    /// Chunks, and whether the snapshot has tiers (by `snapshot_tier`).
    Sync(usize, Vec<usize>, usize, bool),
    ExpireLease(usize),
    Deregister(usize),
    Gc,
    /// A full sync committed but not patched yet (tiered or not): the ops
    /// after it run while its patch is under way.
    SyncUnpatched(usize, Vec<usize>, bool),
    /// One step (budget 2) of a worker's patch under way.
    PatchStep(usize),
}

fn hashes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..12usize, 0..8)
}

fn op() -> impl Strategy<Value = Op> {
    let w = 0..WORKERS.len();
    prop_oneof![
        2 => w.clone().prop_map(Op::Heartbeat),
        3 => (w.clone(), hashes()).prop_map(|(w, h)| Op::Claim(w, h)),
        3 => (w.clone(), hashes(), prop::sample::select(Tier::ALL.to_vec()))
            .prop_map(|(w, h, t)| Op::Stored(w, h, t)),
        2 => (w.clone(), hashes()).prop_map(|(w, h)| Op::Evict(w, h)),
        2 => (w.clone(), hashes(), 1..4usize, any::<bool>())
            .prop_map(|(w, h, c, t)| Op::Sync(w, h, c, t)),
        1 => w.clone().prop_map(Op::ExpireLease),
        1 => w.prop_map(Op::Deregister),
        1 => Just(Op::Gc),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Speculative,
    Confirmed(Tier),
}

impl Kind {
    fn letter(self) -> char {
        match self {
            Kind::Speculative => 's',
            Kind::Confirmed(t) => t.entry_kind(),
        }
    }
}

/// A tiered snapshot's tier of universe hash `i`.
fn snapshot_tier(i: usize) -> Tier {
    Tier::ALL[i % 3]
}

/// The model: live workers' incarnation and block set; dead incarnations.
#[derive(Default)]
struct Model {
    live: BTreeMap<usize, (String, BTreeMap<BlockHash, Kind>)>,
    dead: BTreeSet<String>,
    /// Live workers whose committed sync is still being patched.
    patching: BTreeSet<usize>,
}
