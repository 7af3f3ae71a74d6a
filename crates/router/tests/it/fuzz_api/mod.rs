//! Bounded fuzzing of every parser that takes outside input, as part of the
//! normal suite: proptest generates request bodies (JSON shaped like real
//! requests, arbitrary JSON, arbitrary and mutated bytes) and sends them
//! through a real in-process router, against a real valkey-server and fake
//! workers over HTTP; block hashes are fuzzed directly. (The KV-event
//! decoder and ZMQ frames are fuzzed in `crates/worker/tests/it/kv_events/props.rs`.)
//!
//! Every answer must be a success, a JSON 4xx, or a JSON 502/503/504 (a
//! worker or Valkey failing); never another 5xx, a dropped connection (a
//! panic) or a hang. After each run the router still answers `/health`,
//! and the shared state is consistent: forward and reverse maps agree for
//! every model, and `prefix-router inspect --check` passes.
//!
//! Cases per target: see `cases()` (a few hundred for the bodies sent
//! through the router, each run with new random inputs);
//! `PREFIX_ROUTER_FUZZ_CASES=<n>` runs `n` per target instead (for longer
//! runs by hand: docs/architecture.md, "The test command"). Each test prints how
//! many inputs it executed and the answers by status (`cargo test --test
//! fuzz_api -- --nocapture`); `PREFIX_ROUTER_FUZZ_DEBUG=1` also prints
//! every error answer, to see which inputs the generators waste.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use prefix_router::WORKER_HEADER;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use protocol::hashing::BlockHash;
use serde_json::{Map, Value, json};
use state::{StateTtls, WorkerHeartbeat};
use support::fake_worker::FakeWorker;
use support::{Router, TOKEN, Valkey, args, raw_state, store, tokenizer_dir};

mod block_hashes;
mod openai;
mod push;
mod rig;
use rig::*;

const QWEN: &str = "qwen3";

/// Cases per target: `default`, or `PREFIX_ROUTER_FUZZ_CASES`.
fn cases(default: u32) -> u32 {
    std::env::var("PREFIX_ROUTER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

/// Runs `strategy` through `test`, counting executions (shrinking
/// included); panics with the minimal failing input. Runs on a thread with
/// a large stack: the nested strategies' value trees recurse deeply in
/// debug builds.
fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: impl FnOnce() -> S + Send,
    test: impl Fn(S::Value) -> Result<(), TestCaseError> + Sync,
) -> usize {
    let count = AtomicUsize::new(0);
    let result = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(format!("fuzz {name}"))
            .stack_size(256 << 20)
            .spawn_scoped(scope, || {
                let mut runner = TestRunner::new(config(cases));
                runner
                    .run(&strategy(), |input| {
                        count.fetch_add(1, Ordering::Relaxed);
                        test(input)
                    })
                    .map_err(|e| e.to_string())
            })
            .expect("spawn the fuzz thread")
            .join()
    });
    let n = count.load(Ordering::Relaxed);
    println!("fuzz executions: {name}: {n}");
    match result {
        Ok(Ok(())) => n,
        Ok(Err(e)) => panic!("{name}: {e}"),
        Err(_) => panic!("{name}: the test itself panicked"),
    }
}

// ---------------------------------------------------------------- inputs

/// Any JSON value, a few levels deep; object keys never `endless` (the
/// fake worker's switch for a never-ending stream).
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{1,10}", inner, 0..6).prop_map(|m| {
                Value::Object(m.into_iter().filter(|(k, _)| k != "endless").collect())
            }),
        ]
    })
}

/// Sets `key` to `value` when given.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.to_owned(), v);
    }
}

fn extra_fields() -> impl Strategy<Value = Vec<(String, Value)>> {
    proptest::collection::vec(("[a-z_]{1,12}", arb_json()), 0..3)
        .prop_map(|v| v.into_iter().filter(|(k, _)| k != "endless").collect())
}

fn arb_bool_ish() -> impl Strategy<Value = Value> {
    prop_oneof![8 => any::<bool>().prop_map(Value::Bool), 1 => arb_json()]
}

/// `bytes` with some bytes overwritten, and perhaps truncated.
fn mutate(bytes: Vec<u8>, flips: Vec<(usize, u8)>, cut: Option<usize>) -> Vec<u8> {
    let mut out = bytes;
    if !out.is_empty() {
        for (at, b) in flips {
            let len = out.len();
            out[at % len] = b;
        }
    }
    if let Some(c) = cut {
        out.truncate(c % (out.len() + 1));
    }
    out
}

/// Arbitrary bytes, or a generated body corrupted at the byte level.
fn arb_bytes(body: impl Strategy<Value = Value>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        (
            body,
            proptest::collection::vec(
                (
                    any::<usize>(),
                    prop_oneof![3 => 0x20u8..0x7f, 1 => any::<u8>()]
                ),
                1..4,
            ),
            proptest::option::weighted(0.2, any::<usize>()),
        )
            .prop_map(|(v, flips, cut)| mutate(v.to_string().into_bytes(), flips, cut)),
    ]
}

/// A block hash as a worker may send it: valid (small, to collide), any
/// u64, hex, or malformed in every way.
fn arb_hash() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (0u64..64).prop_map(Value::from),
        2 => any::<u64>().prop_map(Value::from),
        2 => (0u64..64).prop_map(|h| Value::from(BlockHash(h).to_hex())),
        1 => any::<u64>().prop_map(|h| Value::from(format!("{h:016X}"))),
        1 => "[0-9a-fA-FxXg+ -]{0,20}".prop_map(Value::from),
        1 => ".{0,20}".prop_map(Value::from),
        1 => (i64::MIN..0).prop_map(Value::from),
        1 => (-1e20f64..1e20).prop_map(Value::from),
        1 => arb_json(),
    ]
}
