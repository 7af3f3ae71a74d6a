//! Destructive sync: healing lost evictions, and a chunked sync of
//! thousands of patch steps that lookups see as one replacement.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use protocol::hashing::BlockHash;
use state::{BatchLimits, StateStore, StateTtls};
use support::{Valkey, raw_state, register_in, store, store_with};

mod chunked;
mod healing;

const M: &str = "m";

fn ttls() -> StateTtls {
    StateTtls {
        worker_lease: Duration::from_secs(120),
        patch_stall: Duration::from_millis(300),
        ..StateTtls::default()
    }
}

async fn holds(s: &StateStore, h: BlockHash) -> bool {
    let l = s.probe(M, &[h]).await.unwrap();
    l.workers
        .iter()
        .any(|w| w.info.worker_id == "w" && w.matched_blocks == 1)
}
