//! `--check` passes on every state the scripts produce: random
//! sequences of operations, and a fleet running while it reads.

use super::*;

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
