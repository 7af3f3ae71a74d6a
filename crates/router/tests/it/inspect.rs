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

fn codes(report: &Value) -> Vec<String> {
    report["shown"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v["code"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
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

fn bucket_key(h: &str) -> String {
    let b = u16::from_str_radix(&h[..4], 16).unwrap() & !7;
    key(&format!("f:{b:04x}"))
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
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

/// The state of the summary test: two live workers, one draining, a
/// router with requests in flight, a sync in progress.
async fn build_fleet(v: &Valkey) -> (u64, u64, u64) {
    let s = new_store(v, "router-a", long_ttls());
    let load = WorkerLoad {
        num_requests_waiting: 3,
        num_requests_running: 1,
        kv_cache_usage_perc: 0.5,
    };
    let w0 = heartbeat(&s, "w0", Some(load)).await;
    let w1 = heartbeat(&s, "w1", None).await;
    let w2 = heartbeat(&s, "w2", None).await;
    s.router_lease(M, Duration::from_secs(600)).await.unwrap();
    s.stored(M, "w0", &pick(&(0..5).collect::<Vec<_>>()))
        .await
        .unwrap();
    s.assign(M, "w1", &pick(&[10, 11, 12])).await.unwrap();
    s.stored(M, "w2", &pick(&(20..30).collect::<Vec<_>>()))
        .await
        .unwrap();
    s.deregister(M, "w2").await.unwrap();
    partial_sync(&v.client(), &s, "w0", &pick(&[0, 1, 40, 41]), 0).await;
    (w0, w1, w2)
}

fn worker<'a>(model: &'a Value, id: &str) -> &'a Value {
    model["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["worker_id"] == id))
        .unwrap_or_else(|| panic!("no worker {id} in {model:#}"))
}

#[tokio::test]
async fn the_summary_reports_workers_blocks_loads_and_backlogs() {
    let v = Valkey::start();
    let (w0, w1, w2) = build_fleet(&v).await;
    let o = inspect(&v, &["--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&o);
    assert_eq!(s["namespace"], NS);
    assert_eq!(s["unknown_keys"], 0);
    let m = &s["models"][0];
    assert_eq!(m["model"], M);
    assert_eq!(m["listed"], true);
    assert_eq!(m["seq"], 3);
    let a = worker(m, "w0");
    assert_eq!(a["incarnation"], w0);
    assert_eq!(a["status"], "live");
    assert_eq!(a["url"], "http://10.0.0.1:8000/w0");
    assert_eq!(
        a["blocks"], 5,
        "the patch has not added 40 and 41 yet: {a:#}"
    );
    assert_eq!(a["speculative"], 0);
    assert_eq!(a["load"]["waiting"], 3);
    assert_eq!(a["load"]["running"], 1);
    assert_eq!(a["load"]["kv_usage"], 0.5);
    assert!(a["load"]["age_ms"].as_i64().unwrap() >= 0);
    assert!(a["lease_left_ms"].as_i64().unwrap() > 500_000);
    assert_eq!(a["syncing"], true);
    let b = worker(m, "w1");
    assert_eq!(
        (b["incarnation"].as_u64(), b["blocks"].as_u64()),
        (Some(w1), Some(3))
    );
    assert_eq!(b["speculative"], 3);
    assert_eq!(b["load"]["waiting"], Value::Null);
    assert_eq!(b["in_flight"]["router-a"], 1);
    assert_eq!(b["in_flight_counted"], 1);
    let c = worker(m, "w2");
    assert_eq!(
        (c["incarnation"].as_u64(), c["status"].as_str()),
        (Some(w2), Some("draining"))
    );
    assert_eq!(c["blocks"], 10);
    assert_eq!(m["routers"][0]["router_id"], "router-a");
    assert_eq!(m["routers"][0]["live"], true);
    assert_eq!(m["routers"][0]["in_flight"], 1);
    assert_eq!(m["forward"]["entries"], 18);
    assert_eq!(m["forward"]["hashes"], 18);
    assert!(m["forward"]["buckets"].as_u64().unwrap() >= 2);
    assert_eq!(m["purge"]["incarnations"], serde_json::json!([w2]));
    assert_eq!(m["purge"]["entries_left"], 10);
    let sync = &m["syncs"][0];
    assert_eq!(
        (sync["worker_id"].as_str(), sync["phase"].as_str()),
        (Some("w0"), Some("add"))
    );
    assert_eq!(sync["target"], 4);
    // The same as tables; and the state is consistent mid-sync, mid-purge.
    let text = stdout(&inspect(&v, &[]));
    for needle in [
        "model Qwen/Qwen3-8B",
        "w0",
        "draining",
        "router-a=1 (1 counted)",
        "forward map",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    assert_clean(&v, "the summary's fleet");
    let text = stdout(&inspect(&v, &["--check"]));
    assert!(text.contains("OK: no violations"), "{text}");
}

#[tokio::test]
async fn model_filter_and_a_second_namespace() {
    let v = Valkey::start();
    build_fleet(&v).await;
    let mut settings = ConnectionSettings::new(&v.url());
    settings.hot_timeout = Duration::from_secs(2);
    let other = StateStore::new(settings, "other", "r", long_ttls(), tiny_limits()).unwrap();
    let hb = WorkerHeartbeat {
        worker_id: "x".into(),
        url: "http://h:1".into(),
        load: None,
    };
    other.heartbeat("m*[2]", &hb).await.unwrap();
    let s = json(&inspect(&v, &["--json", "--model", M]));
    assert_eq!(s["models"].as_array().map(Vec::len), Some(1));
    let s = json(&inspect_env(&v.url(), "other", &["--json"]));
    let names: Vec<&str> = s["models"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["model"].as_str())
        .collect();
    assert_eq!(
        names,
        ["m*[2]"],
        "other namespace, glob characters in the model name"
    );
    let o = inspect_env(
        &v.url(),
        "other",
        &["--check", "--json", "--model", "m*[2]"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(json(&o)["stats"]["models"], 1);
}

#[derive(Debug, Clone)]
enum Op {
    Heartbeat(usize, bool),
    Assign(usize, Vec<usize>),
    /// On tier `Tier::ALL[t]`.
    Stored(usize, Vec<usize>, usize),
    Evict(usize, Vec<usize>),
    /// With tiers (by hash) when true.
    Sync(usize, Vec<usize>, bool),
    PartialSync(usize, Vec<usize>, usize),
    ExpireLease(usize),
    Deregister(usize),
    Gc(usize),
    Route(Vec<usize>),
    Done(usize),
    Load(usize),
    DeadRouter,
}

fn op() -> impl Strategy<Value = Op> {
    let w = 0..3usize;
    let hs = || prop::collection::vec(0..64usize, 0..10);
    prop_oneof![
        3 => (w.clone(), any::<bool>()).prop_map(|(w, l)| Op::Heartbeat(w, l)),
        3 => (w.clone(), hs()).prop_map(|(w, h)| Op::Assign(w, h)),
        3 => (w.clone(), hs(), 0..3usize).prop_map(|(w, h, t)| Op::Stored(w, h, t)),
        2 => (w.clone(), hs()).prop_map(|(w, h)| Op::Evict(w, h)),
        1 => (w.clone(), hs(), any::<bool>()).prop_map(|(w, h, t)| Op::Sync(w, h, t)),
        2 => (w.clone(), hs(), 0..3usize).prop_map(|(w, h, s)| Op::PartialSync(w, h, s)),
        1 => w.clone().prop_map(Op::ExpireLease),
        1 => w.clone().prop_map(Op::Deregister),
        2 => (0..3usize).prop_map(Op::Gc),
        2 => hs().prop_map(Op::Route),
        1 => w.clone().prop_map(Op::Done),
        1 => w.prop_map(Op::Load),
        1 => Just(Op::DeadRouter),
    ]
}

struct Fleet {
    client: redis::Client,
    store: StateStore,
    short_lease: StateStore,
    short_router: StateStore,
}

impl Fleet {
    fn new(v: &Valkey) -> Fleet {
        let ms = Duration::from_millis(1);
        Fleet {
            client: v.client(),
            store: new_store(v, "router-1", long_ttls()),
            short_lease: new_store(
                v,
                "router-1",
                StateTtls {
                    worker_lease: ms,
                    ..long_ttls()
                },
            ),
            short_router: new_store(
                v,
                "router-2",
                StateTtls {
                    router_lease: ms,
                    ..long_ttls()
                },
            ),
        }
    }

    /// Applies `op`; "unknown worker" and the like are normal outcomes.
    async fn apply(&self, op: &Op) {
        const W: [&str; 3] = ["w0", "w1", "w2"];
        let s = &self.store;
        match op {
            Op::Heartbeat(w, with_load) => {
                let load = with_load.then_some(WorkerLoad {
                    num_requests_waiting: *w as u64,
                    ..WorkerLoad::default()
                });
                heartbeat(s, W[*w], load).await;
            }
            Op::Assign(w, hs) => drop(s.assign(M, W[*w], &pick(hs)).await),
            Op::Stored(w, hs, t) => drop(
                s.stored_on(M, W[*w], &pick(hs), protocol::Tier::ALL[*t])
                    .await,
            ),
            Op::Evict(w, hs) => drop(s.evict(M, W[*w], &pick(hs)).await),
            Op::Sync(w, hs, tiered) => {
                let tiers: Vec<protocol::Tier> = hs
                    .iter()
                    .map(|i| {
                        if *tiered {
                            protocol::Tier::ALL[i % 3]
                        } else {
                            protocol::Tier::Gpu
                        }
                    })
                    .collect();
                drop(
                    s.sync_in_families(M, W[*w], &pick(hs), None, Some(&tiers))
                        .await,
                )
            }
            Op::PartialSync(w, hs, steps) => {
                partial_sync(&self.client, s, W[*w], &pick(hs), *steps).await
            }
            Op::ExpireLease(w) => {
                heartbeat(&self.short_lease, W[*w], None).await;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            Op::Deregister(w) => drop(s.deregister(M, W[*w]).await),
            Op::Gc(purge_steps) => drop(s.gc(M, *purge_steps).await.unwrap()),
            Op::Route(hs) => {
                let params = state::RouteParams {
                    prompt_tokens: 16 * hs.len() as u64,
                    block_size: 16,
                    epsilon: 0.5,
                    load_slack: 2,
                    tokens_per_queued_request: 100.0,
                    max_num_seqs: 256,
                    tokens_per_running_request: 16.0,
                    uncached_weight: 1.0,
                    cpu_tier_weight: 0.5,
                    disk_tier_weight: 0.25,
                    kv_pressure_tokens: 0.0,
                    kv_pressure_from: 0.9,
                    stale_load: Duration::from_secs(10),
                    seed: 7,
                };
                s.route(M, &pick(hs), &params, &[], &[]).await.unwrap();
            }
            Op::Done(w) => drop(
                s.change_in_flight(M, W[*w], state::InFlight::requests(-1))
                    .await,
            ),
            Op::Load(w) => drop(s.report_load(M, W[*w], Some(2), Some(1), Some(0.25)).await),
            // Routers renew leases only on listed models (serve's lease loop).
            Op::DeadRouter if s.models().await.unwrap().iter().any(|m| m == M) => {
                self.short_router
                    .router_lease(M, Duration::from_millis(1))
                    .await
                    .unwrap();
                drop(self.short_router.assign(M, "w0", &pick(&[63])).await);
            }
            Op::DeadRouter => {}
        }
    }
}

#[test]
fn check_passes_on_states_the_scripts_produce() {
    let v = Valkey::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = ProptestConfig {
        cases: 12,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in prop::collection::vec(op(), 1..30))| {
        flush(&v);
        rt.block_on(async {
            let fleet = Fleet::new(&v);
            for (n, op) in ops.iter().enumerate() {
                fleet.apply(op).await;
                if n == ops.len() / 2 {
                    assert_clean(&v, &format!("after {:?}", &ops[..=n]));
                }
            }
        });
        assert_clean(&v, &format!("after {ops:?}"));
    });
}

/// Builds a small consistent fleet: w0 (confirmed blocks), w1 (speculative
/// ones); returns their incarnations.
async fn small_fleet(v: &Valkey) -> (u64, u64) {
    flush(v);
    let s = new_store(v, "router-a", long_ttls());
    let w0 = heartbeat(&s, "w0", None).await;
    let w1 = heartbeat(&s, "w1", None).await;
    s.router_lease(M, Duration::from_secs(600)).await.unwrap();
    s.stored(M, "w0", &pick(&[0, 1, 2, 3])).await.unwrap();
    s.assign(M, "w1", &pick(&[8, 9])).await.unwrap();
    (w0, w1)
}

#[tokio::test]
async fn each_corruption_fails_the_check_by_name() {
    let v = Valkey::start();
    let h = |i: usize| pick(&[i])[0].to_hex();
    let far = (now_s() + 10 * 86_400).to_string();
    type Corrupt = Box<dyn Fn(&Valkey, u64, u64)>;
    let cases: Vec<(&str, Corrupt)> = vec![
        (
            "forward-without-reverse",
            Box::new(move |v, w0, _| {
                let _: () = raw(
                    v,
                    &[
                        "HSET",
                        &bucket_key(&h(30)),
                        &h(30),
                        &format!("{w0}c{}", now_s() + 600),
                    ],
                );
            }),
        ),
        (
            "reverse-without-forward",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["SADD", &key(&format!("r:{w0}")), &h(31)]);
            }),
        ),
        (
            "entry-of-unknown-incarnation",
            Box::new(move |v, _, _| {
                let _: () = raw(v, &["HSET", &bucket_key(&h(32)), &h(32), "99c1"]);
                let _: () = raw(v, &["SADD", &key("r:99"), &h(32)]);
            }),
        ),
        (
            "keys-of-unknown-incarnation",
            Box::new(move |v, _, _| {
                let _: () = raw(v, &["SADD", &key("sp:98"), &h(33)]);
            }),
        ),
        (
            "missing-view-record",
            Box::new(|v, w0, _| {
                let _: () = raw(v, &["HDEL", &key("view"), &w0.to_string()]);
            }),
        ),
        (
            "stale-view-record",
            Box::new(|v, w0, _| {
                let _: () = raw(
                    v,
                    &["HSET", &key(&format!("w:{w0}")), "url", "http://elsewhere"],
                );
            }),
        ),
        (
            "unknown-key",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["SET", &key("junk"), "1"]);
            }),
        ),
        (
            "unknown-key",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["SET", &format!("{NS}:{M}:ids"), "no hash tag"]);
            }),
        ),
        (
            "speculative-not-in-sp",
            Box::new(move |v, _, w1| {
                let _: () = raw(v, &["SREM", &key(&format!("sp:{w1}")), &h(8)]);
            }),
        ),
        (
            "sp-member-not-speculative",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["SADD", &key(&format!("sp:{w0}")), &h(0)]);
            }),
        ),
        (
            "speculative-expiry-too-far",
            Box::new(move |v, _, w1| {
                let _: () = raw(
                    v,
                    &["HSET", &bucket_key(&h(9)), &h(9), &format!("{w1}s{far}")],
                );
            }),
        ),
        (
            "id-of-unknown-incarnation",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["HSET", &key("ids"), "ghost", "77"]);
            }),
        ),
        (
            "malformed-entry",
            Box::new(move |v, w0, _| {
                let _: () = raw(
                    v,
                    &["HSET", &bucket_key(&h(1)), &h(1), &format!("{w0}c,{w0}x")],
                );
            }),
        ),
        (
            // A tier letter the scripts never write (CPU is h, disk d).
            "malformed-entry",
            Box::new(move |v, w0, _| {
                let _: () = raw(
                    v,
                    &[
                        "HSET",
                        &bucket_key(&h(2)),
                        &h(2),
                        &format!("{w0}g{}", now_s() + 600),
                    ],
                );
            }),
        ),
        (
            "malformed-entry",
            Box::new(move |v, w0, _| {
                let exp = now_s() + 600;
                let _: () = raw(
                    v,
                    &[
                        "HSET",
                        &bucket_key(&h(3)),
                        &h(3),
                        &format!("{w0}h{exp},{w0}d{exp}"),
                    ],
                );
            }),
        ),
        (
            // The target's tiers outliving the sync they belong to.
            "sync-target-not-syncing",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["HSET", &key(&format!("st:{w0}")), &h(4), "h"]);
            }),
        ),
        (
            "stage-without-ttl",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["HSET", &key(&format!("stage_t:{w0}:s1")), &h(5), "d"]);
            }),
        ),
        (
            "wrong-type",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["SET", &key("purge"), "x"]);
            }),
        ),
        (
            "model-not-listed",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["SREM", &format!("{NS}:models"), M]);
            }),
        ),
        (
            "inflight-of-unknown-incarnation",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["HSET", &key("view"), "97:router-z", "2"]);
            }),
        ),
        (
            "inflight-of-unknown-incarnation",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["HSET", &key("view"), "p97:router-z", "500"]);
            }),
        ),
        (
            "bad-view-field",
            Box::new(|v, w0, _| {
                let _: () = raw(v, &["HSET", &key("view"), &format!("p{w0}:router-a"), "-3"]);
            }),
        ),
        (
            "inflight-of-dead-router",
            Box::new(|v, w0, _| {
                let lease = (now_s() - 60) * 1000;
                let _: () = raw(
                    v,
                    &["ZADD", &key("routers"), &lease.to_string(), "router-old"],
                );
                let _: () = raw(v, &["HSET", &key("view"), &format!("{w0}:router-old"), "1"]);
            }),
        ),
        (
            "unexpected-ttl",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["EXPIRE", &key(&format!("r:{w0}")), "3600"]);
            }),
        ),
    ];
    for (n, (want, corrupt)) in cases.iter().enumerate() {
        let (w0, w1) = small_fleet(&v).await;
        assert_clean(&v, "before corrupting");
        corrupt(&v, w0, w1);
        // The re-check path with a delay once; at once otherwise.
        let (code, report) = check(&v, if n == 0 { "50ms" } else { "0" });
        assert_eq!(code, 1, "{want}: {report:#}");
        assert!(
            codes(&report).iter().any(|c| c == want),
            "{want} not named in {report:#}"
        );
        assert_eq!(report["clean"], false);
    }
    // Human output names the violation and its invariant.
    small_fleet(&v).await;
    let _: () = raw(&v, &["HSET", &key("view"), "97:router-a", "2"]);
    let o = inspect(&v, &["--check", "--recheck-delay", "0"]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(
        text.contains("VIOLATION [4 inflight-of-unknown-incarnation]"),
        "{text}"
    );
    assert!(text.contains("FAILED: 1 violations"), "{text}");
}

#[tokio::test]
async fn check_passes_while_the_fleet_keeps_running() {
    let v = Valkey::start();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..3usize {
        let (stop, fleet) = (stop.clone(), Fleet::new(&v));
        tasks.push(tokio::spawn(async move {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let hs: Vec<usize> = (0..8).map(|k| (i * 5 + k * 3 + w * 11) % 64).collect();
                let op = match i % 9 {
                    0 => Op::Heartbeat(w, true),
                    1 | 5 => Op::Assign(w, hs),
                    2 | 6 => Op::Stored(w, hs, i % 3),
                    3 => Op::Evict(w, hs),
                    4 => Op::Route(hs),
                    7 if i % 27 == 7 => Op::Sync(w, hs, i.is_multiple_of(2)),
                    7 => Op::Gc(2),
                    _ if i % 45 == 8 => Op::ExpireLease(w),
                    _ => Op::Done(w),
                };
                fleet.apply(&op).await;
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        let url = v.url();
        let o = tokio::task::spawn_blocking(move || {
            inspect_env(&url, NS, &["--check", "--json", "--recheck-delay", "100ms"])
        })
        .await
        .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert_clean(&v, "after the fleet stopped");
}

#[tokio::test]
async fn acl_user_with_read_rights_only_and_no_secret_in_output() {
    let v = Valkey::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--requirepass",
        "adm1n-pw",
        "--user",
        "inspector",
        "on",
        ">insp-s3cret",
        "~*",
        "&*",
        "+@read",
        "+time",
        "+multi",
        "+exec",
    ]);
    let admin = format!("redis://:adm1n-pw@127.0.0.1:{}", v.port);
    let settings = ConnectionSettings::new(&admin);
    let s = StateStore::new(settings, NS, "r", long_ttls(), tiny_limits()).unwrap();
    let hb = WorkerHeartbeat {
        worker_id: "w0".into(),
        url: "http://h:1".into(),
        load: None,
    };
    s.heartbeat(M, &hb).await.unwrap();
    s.stored(M, "w0", &pick(&[1, 2, 3])).await.unwrap();
    let url = format!("redis://inspector:insp-s3cret@127.0.0.1:{}", v.port);
    let o = inspect_env(&url, NS, &["--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = json(&o);
    assert_eq!(
        summary["valkey"],
        format!("redis://inspector:***@127.0.0.1:{}", v.port)
    );
    assert_eq!(worker(&summary["models"][0], "w0")["blocks"], 3);
    // A violation makes the check re-read with MULTI/EXEC: still read-only.
    let mut c = redis::Client::open(admin.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SADD")
        .arg(key("r:1"))
        .arg(pick(&[9])[0].to_hex())
        .query(&mut c)
        .unwrap();
    let o = inspect_env(&url, NS, &["--check", "--recheck-delay", "0"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout(&o).contains("reverse-without-forward"));
    for o in [&o, &inspect_env(&url, NS, &[])] {
        let all = format!("{}{}", stdout(o), String::from_utf8_lossy(&o.stderr));
        assert!(!all.contains("insp-s3cret"), "the password leaked: {all}");
    }
    // A wrong password is an error (exit 2), and is not printed either.
    let bad = format!("redis://inspector:wr0ng-pw@127.0.0.1:{}", v.port);
    let o = inspect_env(&bad, NS, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("wr0ng-pw") && err.contains("***"), "{err}");
}

#[tokio::test]
async fn tls_through_a_valkeys_url() {
    let tls = support::tls::TlsValkey::start();
    let v = &tls.valkey;
    let s = new_store(v, "r", long_ttls());
    heartbeat(&s, "w0", None).await;
    s.stored(M, "w0", &pick(&[1, 2])).await.unwrap();
    let url = tls.url();
    let run = |args: &[&str]| {
        support::router_command("inspect")
            .args(["--valkey", &url, "--key-prefix", NS])
            .args(args.iter().copied())
            .env("SSL_CERT_FILE", &tls.ca_file)
            .output()
            .unwrap()
    };
    let o = run(&["--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(worker(&json(&o)["models"][0], "w0")["blocks"], 2);
    assert_eq!(run(&["--check"]).status.code(), Some(0));
}

#[tokio::test]
async fn tenant_limit_keys_pass_the_check_and_need_a_ttl() {
    let v = Valkey::start();
    let s = new_store(&v, "router-a", long_ttls());
    let gcra = state::Gcra {
        interval_us: 1_000_000,
        tolerance_us: 2_000_000,
    };
    let limits = state::LimitCheck {
        requests: Some(gcra),
        tokens: Some(gcra),
        cost: 1,
        max_concurrent: Some(3),
    };
    let tenant = "key:0123456789abcdef";
    s.limit_admit(tenant, &limits, false).await.unwrap();
    assert_clean(&v, "after an admission");
    let _: () = redis::cmd("PERSIST")
        .arg(format!("{NS}:tenant:{{{tenant}}}:cc"))
        .query(&mut v.conn())
        .unwrap();
    let (code, report) = check(&v, "0");
    assert_ne!(code, 0);
    assert!(
        codes(&report).contains(&"tenant-key-without-ttl".to_owned()),
        "{report:#}"
    );
}
