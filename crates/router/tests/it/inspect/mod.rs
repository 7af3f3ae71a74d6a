//! `prefix-router inspect`: the summary reports the state the scripts built,
//! `--check` passes on every state the scripts produce (random sequences,
//! and a fleet running while it reads) and names each hand-made corruption.
//! The real binary runs against real valkey-servers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use protocol::WorkerLoad;
use protocol::hashing::BlockHash;
use serde_json::Value;
use state::{
    BatchLimits, ConnectionSettings, ScriptName, ScriptSet, StateStore, StateTtls, WorkerHeartbeat,
};
use support::Valkey;

mod access;
mod corruptions;
mod scripted;
mod summary;

const NS: &str = "it";
const M: &str = "Qwen/Qwen3-8B";

/// Runs `prefix-router inspect` with `args` (the connection comes from the
/// same environment variables as `serve`).
fn inspect_env(url: &str, ns: &str, args: &[&str]) -> Output {
    support::router_command("inspect")
        .args(args.iter().copied())
        .env("PREFIX_ROUTER_VALKEY", url)
        .env("PREFIX_ROUTER_KEY_PREFIX", ns)
        .output()
        .expect("run prefix-router inspect")
}

fn inspect(v: &Valkey, args: &[&str]) -> Output {
    inspect_env(&v.url(), NS, args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            stdout(o),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// `inspect --check --json`: (exit code, report).
fn check(v: &Valkey, delay: &str) -> (i32, Value) {
    let o = inspect(
        v,
        &[
            "--check",
            "--json",
            "--recheck-delay",
            delay,
            "--show",
            "1000",
        ],
    );
    (o.status.code().unwrap_or(-1), json(&o))
}

fn assert_clean(v: &Valkey, context: &str) {
    let (code, report) = check(v, "0");
    assert_eq!(code, 0, "{context}: {report:#}");
    assert_eq!(report["clean"], true, "{context}");
}

fn long_ttls() -> StateTtls {
    StateTtls {
        speculative: Duration::from_secs(600),
        worker_lease: Duration::from_secs(600),
        router_lease: Duration::from_secs(600),
        ..StateTtls::default()
    }
}

fn tiny_limits() -> BatchLimits {
    BatchLimits {
        hashes_per_call: 3,
        stage_per_call: 2,
        step_budget: 2,
        sweep_budget: 2,
        ..BatchLimits::default()
    }
}

fn new_store(v: &Valkey, router: &str, ttls: StateTtls) -> StateStore {
    let mut settings = ConnectionSettings::new(&v.url());
    settings.hot_timeout = Duration::from_secs(2);
    StateStore::new(settings, NS, router, ttls, tiny_limits()).unwrap()
}

async fn heartbeat(s: &StateStore, id: &str, load: Option<WorkerLoad>) -> u64 {
    let hb = WorkerHeartbeat {
        worker_id: id.into(),
        url: format!("http://10.0.0.1:8000/{id}"),
        load,
    };
    s.heartbeat(M, &hb).await.unwrap().incarnation
}

/// 64 hashes over a few buckets (8 per bucket).
fn hashes() -> Vec<BlockHash> {
    (0..64u64)
        .map(|i| BlockHash(((0x3a70 + (i / 8) * 8) << 48) | (i * 7919 + 1)))
        .collect()
}

fn pick(idx: &[usize]) -> Vec<BlockHash> {
    let all = hashes();
    idx.iter().map(|&i| all[i % all.len()]).collect()
}

fn flush(v: &Valkey) {
    let _: () = redis::cmd("FLUSHALL").query(&mut v.conn()).unwrap();
}

fn raw<T: redis::FromRedisValue>(v: &Valkey, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut v.conn()).unwrap()
}

fn key(suffix: &str) -> String {
    format!("{NS}:{{{M}}}:{suffix}")
}

/// Stages and commits a sync through the raw scripts, then applies at most
/// `steps` patch steps: a sync left in progress, as a crashed router would.
async fn partial_sync(
    client: &redis::Client,
    s: &StateStore,
    w: &str,
    hs: &[BlockHash],
    steps: usize,
) {
    let id = format!("p{}", hs.len());
    // Tiers by hash, so that a patch in progress has a target with tiers.
    let tiers: Vec<protocol::Tier> = hs
        .iter()
        .map(|h| protocol::Tier::ALL[(h.0 % 3) as usize])
        .collect();
    if s.sync_stage_in_families(M, w, &id, hs, None, Some(&tiers))
        .await
        .is_err()
    {
        return;
    }
    let scripts = ScriptSet::new();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let (base, ids) = (format!("{NS}:{{{M}}}"), key("ids"));
    let r: Result<Vec<i64>, _> = scripts
        .call(
            &mut c,
            ScriptName::SyncCommit,
            &[&ids],
            &[base.as_bytes(), w.as_bytes(), id.as_bytes(), b"600000"],
        )
        .await;
    let Ok(r) = r else { return };
    let idx = r[2].to_string();
    for _ in 0..steps {
        let _: Vec<i64> = scripts
            .call(
                &mut c,
                ScriptName::SyncPatch,
                &[&ids],
                &[base.as_bytes(), idx.as_bytes(), b"1"],
            )
            .await
            .unwrap();
    }
}

fn worker<'a>(model: &'a Value, id: &str) -> &'a Value {
    model["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["worker_id"] == id))
        .unwrap_or_else(|| panic!("no worker {id} in {model:#}"))
}
