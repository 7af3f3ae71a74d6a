//! `prefix_router::push` against a real router on a real valkey-server: the
//! shared state ends up equal to the worker's own set through batched
//! reports, chunked syncs, a Valkey outage, a fleet that forgot the worker,
//! and an overflow of pending reports; the client's errors say what failed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use protocol::WorkerLoad;
use protocol::family::FamilyBlock;
use protocol::hashing::BlockHash;
use support::{M, Router, TOKEN, Valkey, args, free_port};
use worker::push::{
    BlockSource, FleetClient, FleetClientConfig, PushError, Pusher, PusherConfig, PusherHandle,
    PusherStatus, WorkerIdentity,
};

/// Blocks of unknown family (the fleet here has one shard).
fn unplaced(hashes: &[BlockHash]) -> Vec<FamilyBlock> {
    hashes.iter().map(|&h| FamilyBlock::unplaced(h)).collect()
}

/// A worker's cache as a plain set; reports go to the pusher under its lock
/// (the [`BlockSource`] contract).
/// Block `n` of the test: a hash spread over all 64 bits, as engine hashes
/// are (the fleet's sync digests XOR hashes per bucket of their first byte;
/// small integers would all share one bucket and cancel).
fn bh(n: u64) -> BlockHash {
    BlockHash(n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

#[derive(Default)]
struct Source {
    set: Mutex<BTreeSet<BlockHash>>,
    handle: OnceLock<PusherHandle>,
}

impl Source {
    fn store(&self, hashes: &[u64]) {
        let mut set = self.set.lock().unwrap();
        let hashes: Vec<BlockHash> = hashes.iter().map(|&h| bh(h)).collect();
        set.extend(&hashes);
        self.handle.get().unwrap().stored(&unplaced(&hashes));
    }

    fn evict(&self, hashes: &[u64]) {
        let mut set = self.set.lock().unwrap();
        let hashes: Vec<BlockHash> = hashes.iter().map(|&h| bh(h)).collect();
        for h in &hashes {
            set.remove(h);
        }
        self.handle.get().unwrap().evicted(&unplaced(&hashes));
    }

    fn hex(&self) -> BTreeSet<String> {
        self.set
            .lock()
            .unwrap()
            .iter()
            .map(|h| h.to_hex())
            .collect()
    }
}

impl BlockSource for Source {
    fn snapshot(&self) -> Vec<FamilyBlock> {
        unplaced(&self.set.lock().unwrap().iter().copied().collect::<Vec<_>>())
    }

    fn load(&self) -> Option<WorkerLoad> {
        Some(WorkerLoad {
            num_requests_waiting: 1,
            num_requests_running: 2,
            kv_cache_usage_perc: 0.25,
        })
    }
}

fn identity(worker: &str) -> WorkerIdentity {
    WorkerIdentity {
        worker_id: worker.into(),
        model: M.into(),
        url: "http://127.0.0.1:9".into(),
        role: None,
    }
}

fn client(router: &Router, token: &str) -> FleetClient {
    let mut config = FleetClientConfig::new(router.url(""), Some(token.into()));
    config.max_batch = 100;
    config.sync_chunk = 256;
    FleetClient::new(config).unwrap()
}

/// Starts a pusher for `worker` over `source`, with syncs only on demand
/// (unless `sync_interval` says otherwise).
fn start(
    router: &Router,
    worker: &str,
    source: &Arc<Source>,
    tune: impl FnOnce(&mut PusherConfig),
) -> Pusher {
    let mut config = PusherConfig::new(identity(worker));
    config.sync_interval = Duration::from_secs(3600);
    tune(&mut config);
    let pusher = Pusher::start(client(router, TOKEN), config, source.clone());
    source.handle.set(pusher.handle()).unwrap();
    pusher
}

/// The hashes the shared state holds for `worker`'s live incarnation.
fn held(valkey: &Valkey, worker: &str) -> BTreeSet<String> {
    support::worker_blocks(valkey, "pr", M, worker)
}

/// Polls until `check` holds, for up to 10 s.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn converged(valkey: &Valkey, worker: &str, source: &Source) {
    eventually("the shared state to match the source", || {
        held(valkey, worker) == source.hex()
    })
    .await;
}

fn status(source: &Source) -> PusherStatus {
    source.handle.get().unwrap().status()
}

/// Waits until the pusher's status satisfies `ok` (its counters move only
/// once the fleet's reply is in, a little after the state changed).
async fn settled(source: &Source, what: &str, ok: impl Fn(&PusherStatus) -> bool) -> PusherStatus {
    eventually(what, || ok(&status(source))).await;
    status(source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_and_chunked_syncs_keep_the_state_equal_to_the_worker() {
    let valkey = Valkey::start();
    let router = Router::start(&valkey.url(), args()).await;
    let source = Arc::new(Source::default());
    // A first snapshot of 1,000 hashes: four sync chunks of 256.
    source.set.lock().unwrap().extend((1..=1000).map(bh));
    let pusher = start(&router, "w", &source, |_| {});
    converged(&valkey, "w", &source).await;
    settled(&source, "the first sync", |s| s.syncs == 1).await;

    // Batches of up to 100 hashes per request; within one window the last
    // report of a hash wins.
    source.store(&(2000..2500).collect::<Vec<_>>());
    source.evict(&(1..=300).collect::<Vec<_>>());
    source.store(&[5000]);
    source.evict(&[5000]); // stored then evicted: absent
    source.evict(&[400]);
    source.store(&[400]); // evicted then stored: present
    converged(&valkey, "w", &source).await;
    let s = settled(&source, "a flush", |s| s.flushes >= 1).await;
    assert!(s.syncs == 1 && s.failures == 0, "{s:?}");

    pusher.shutdown(true).await.unwrap();
    eventually("the drained worker's entries purged", || {
        held(&valkey, "w").is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_lost_in_an_outage_are_healed_by_a_resync() {
    // Durable, so that the restarted server still knows the worker.
    let mut valkey = Valkey::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
    ]);
    let router = Router::start(&valkey.url(), args()).await;
    let source = Arc::new(Source::default());
    source.set.lock().unwrap().extend((1..=50).map(bh));
    let _pusher = start(&router, "w", &source, |_| {});
    converged(&valkey, "w", &source).await;
    let first = settled(&source, "the first sync", |s| s.syncs == 1).await;

    valkey.kill();
    source.store(&[100, 101, 102]);
    source.evict(&[1, 2, 3]);
    eventually("a failed push", || status(&source).failures > 0).await;
    assert!(status(&source).resync_due.is_some());
    valkey.restart();
    converged(&valkey, "w", &source).await;
    let s = settled(&source, "a second sync", |s| s.syncs >= 2).await;
    assert_eq!(
        s.incarnation, first.incarnation,
        "same lease: healed by the resync alone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_that_forgot_the_worker_gets_a_full_snapshot() {
    let valkey = Valkey::start();
    let router = Router::start(&valkey.url(), args()).await;
    let source = Arc::new(Source::default());
    source.set.lock().unwrap().extend((1..=20).map(bh));
    let _pusher = start(&router, "w", &source, |_| {});
    converged(&valkey, "w", &source).await;
    settled(&source, "the first sync", |s| s.syncs == 1).await;

    // The state is lost: the next heartbeat registers a new incarnation
    // (numbered 1 again, as the counter went too), answered by a snapshot.
    let _: () = redis::cmd("FLUSHALL").query(&mut valkey.conn()).unwrap();
    converged(&valkey, "w", &source).await;
    let second = settled(&source, "a second sync", |s| s.syncs == 2)
        .await
        .incarnation;

    // Drained by an operator while running: the same.
    client(&router, TOKEN)
        .deregister(&identity("w"))
        .await
        .unwrap();
    eventually("a third incarnation", || {
        status(&source).incarnation != second
    })
    .await;
    converged(&valkey, "w", &source).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_reports_over_their_bound_become_a_resync() {
    let valkey = Valkey::start();
    let router = Router::start(&valkey.url(), args()).await;
    let source = Arc::new(Source::default());
    let _pusher = start(&router, "w", &source, |c| c.max_pending = 8);
    eventually("registered", || status(&source).syncs == 1).await;
    source.store(&(1..=100).collect::<Vec<_>>());
    converged(&valkey, "w", &source).await;
    let s = settled(&source, "a second sync", |s| s.syncs == 2).await;
    assert!(s.dropped_overflow > 0, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_say_what_failed_and_whether_to_retry() {
    let valkey = Valkey::start();
    let router = Router::start(&valkey.url(), args()).await;
    let who = identity("never-registered");

    let err = client(&router, "wrong")
        .heartbeat(&who, None, None)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert!(!err.is_retryable(), "{err}");

    let err = client(&router, TOKEN)
        .stored(&who, &[FamilyBlock::unplaced(BlockHash(1))])
        .await
        .unwrap_err();
    assert!(err.is_unknown_worker() && !err.is_retryable(), "{err}");
    assert!(err.to_string().contains("/internal/stored"), "{err}");

    let mut config =
        FleetClientConfig::new(format!("http://127.0.0.1:{}", free_port().unwrap()), None);
    config.attempts = 2;
    let err = FleetClient::new(config)
        .unwrap()
        .heartbeat(&who, None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, PushError::Transport { .. }) && err.not_sent() && err.is_retryable());

    let reply = client(&router, TOKEN)
        .heartbeat(&who, None, None)
        .await
        .unwrap();
    assert!(reply.registered && reply.lease_ms > 0);
    let again = client(&router, TOKEN)
        .heartbeat(&who, None, None)
        .await
        .unwrap();
    assert!(!again.registered && again.incarnation == reply.incarnation);
}

/// The example of `worker::push`'s module documentation, run against a real
/// router (it was a compile-only doctest): the same calls, each checked in
/// the shared state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_push_module_example_runs_against_a_router() {
    let valkey = Valkey::start();
    let router = Router::start(&valkey.url(), args()).await;
    let cache = Arc::new(Source::default());
    let source: Arc<dyn BlockSource> = cache.clone();
    let result: Result<(), PushError> = async {
        let client = FleetClient::new(FleetClientConfig::new(router.url(""), Some(TOKEN.into())))?;
        let identity = WorkerIdentity {
            worker_id: "gpu-0".into(),
            model: M.into(),
            url: "http://10.0.0.5:8000".into(),
            role: None,
        };
        let pusher = Pusher::start(client, PusherConfig::new(identity), source);
        let handle = pusher.handle();
        // A block, its prefix family (the hash of its chain's first block)
        // and the best medium it is held on.
        let block = FamilyBlock {
            hash: BlockHash(0x7219_bff9_b083_37ef),
            family: Some(BlockHash(0x0c3e_12aa_9f00_7d21)),
            tier: protocol::Tier::Gpu,
        };
        // The worker's cache holds what it reports (the `BlockSource`
        // contract: a sync sends the source's snapshot).
        cache.set.lock().unwrap().insert(block.hash);
        handle.stored(&[block]); // from BlockStored
        let one = BTreeSet::from([block.hash.to_hex()]);
        eventually("the stored block in the shared state", || {
            held(&valkey, "gpu-0") == one
        })
        .await;
        cache.set.lock().unwrap().remove(&block.hash);
        handle.evicted(&[block]); // from BlockRemoved
        eventually("the evicted block gone", || {
            held(&valkey, "gpu-0").is_empty()
        })
        .await;
        pusher.shutdown(true).await?; // and drain the worker
        Ok(())
    }
    .await;
    result.unwrap();
}

/// A heartbeat that falls due while reports are pending rides on the flush
/// (one `events` request for both): most heartbeats are then not requests
/// of their own, and the lease stays renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_heartbeat_rides_on_the_flush() {
    let valkey = Valkey::start();
    let router = Router::start(&valkey.url(), args()).await;
    let source = Arc::new(Source::default());
    let pusher = start(&router, "w", &source, |c| {
        c.heartbeat_interval = Duration::from_millis(150);
    });
    settled(&source, "the first sync", |s| s.syncs == 1).await;
    // A report every 20 ms for 2 s: reports pending at every heartbeat.
    for i in 0..100 {
        source.store(&[10_000 + i]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    converged(&valkey, "w", &source).await;
    let s = status(&source);
    let metrics = support::metrics_text(&router).await;
    let alone: u64 = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                r#"prefix_router_http_requests_total{route="/internal/heartbeat",status="200"}"#,
            )
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        s.heartbeats >= 8 && s.failures == 0 && s.registered,
        "{s:?}"
    );
    assert!(
        alone * 2 < s.heartbeats,
        "{alone} heartbeats sent alone of {}",
        s.heartbeats
    );
    pusher.shutdown(false).await.unwrap();
}
