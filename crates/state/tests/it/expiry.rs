//! Expiry: speculative entries, worker leases, gc.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use protocol::hashing::BlockHash;
use state::{StateStore, StateTtls, WorkerHeartbeat};
use support::{Valkey, fast_ttls, raw_state, store};

const M: &str = "m";

fn hb(id: &str) -> WorkerHeartbeat {
    WorkerHeartbeat {
        worker_id: id.into(),
        url: "http://127.0.0.1:9".into(),
        load: None,
    }
}

async fn matched(s: &StateStore, h: BlockHash, worker: &str) -> Option<usize> {
    let l = s.probe(M, &[h]).await.unwrap();
    l.workers
        .iter()
        .find(|w| w.info.worker_id == worker)
        .map(|w| w.matched_blocks)
}

#[tokio::test]
async fn speculative_entries_expire_unless_confirmed() {
    let v = Valkey::start();
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(60),
        ..fast_ttls()
    };
    let s = store(&v, "ex", "r1", ttls);
    s.heartbeat(M, &hb("w")).await.unwrap();
    let (a, b) = (BlockHash(0xa), BlockHash(0xb));
    assert_eq!(s.claim(M, "w", &[a, b]).await.unwrap(), 2);
    // A second claim of held blocks inserts nothing.
    assert_eq!(s.claim(M, "w", &[a, b]).await.unwrap(), 0);
    s.stored(M, "w", &[b]).await.unwrap();
    assert_eq!(matched(&s, a, "w").await, Some(1));
    // Speculative TTL 1.5 s, stored with whole-second expiry: gone by 2.6 s.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert_eq!(
        matched(&s, a, "w").await,
        Some(0),
        "speculative entry outlived its TTL"
    );
    assert_eq!(
        matched(&s, b, "w").await,
        Some(1),
        "confirmed entry expired early"
    );
    // The expired entry is still stored until gc sweeps it.
    assert!(raw_state(&v, "ex", M).forward.contains_key(&a.to_hex()));
    let r = s.gc(M, 10).await.unwrap();
    assert_eq!(r.swept_entries, 1);
    let raw = raw_state(&v, "ex", M);
    assert!(!raw.forward.contains_key(&a.to_hex()));
    assert_eq!(raw.forward_pairs(), raw.reverse_pairs());
    // Once expired, a claim inserts the block again.
    assert_eq!(s.claim(M, "w", &[a]).await.unwrap(), 1);
}

#[tokio::test]
async fn an_expired_worker_leaves_lookups_at_once_and_gc_purges_it() {
    let v = Valkey::start();
    let s = store(&v, "ex", "r1", fast_ttls());
    let first = s.heartbeat(M, &hb("w")).await.unwrap();
    s.heartbeat(M, &hb("other")).await.unwrap();
    let hashes: Vec<BlockHash> = (1..=300).map(BlockHash).collect();
    s.stored(M, "w", &hashes).await.unwrap();
    assert_eq!(matched(&s, hashes[0], "w").await, Some(1));
    // Keep "other" alive, let "w" lapse (lease 1.5 s).
    tokio::time::sleep(Duration::from_millis(900)).await;
    s.heartbeat(M, &hb("other")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        matched(&s, hashes[0], "w").await,
        None,
        "expired worker still routable"
    );
    assert!(matched(&s, hashes[0], "other").await.is_some());
    // Reports from an expired worker are refused until it heartbeats again.
    assert!(s.stored(M, "w", &hashes[..1]).await.is_err());
    let r = s.gc(M, 1000).await.unwrap();
    assert_eq!(r.expired_workers, 1);
    assert_eq!(r.purged_entries, 300);
    assert!(raw_state(&v, "ex", M).forward.is_empty());
    // The routing view forgets the purged incarnation and its counts.
    let view: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("ex:{{{M}}}:view"))
        .query(&mut v.conn())
        .unwrap();
    let gone = first.incarnation.to_string();
    assert!(
        !view
            .iter()
            .any(|f| *f == gone || f.starts_with(&format!("{gone}:"))),
        "view still names the purged worker: {view:?}"
    );
    // Coming back is a new incarnation with an empty cache view.
    let again = s.heartbeat(M, &hb("w")).await.unwrap();
    assert!(again.new && again.incarnation != first.incarnation);
    assert_eq!(matched(&s, hashes[0], "w").await, Some(0));
}

#[tokio::test]
async fn a_crashed_routers_in_flight_share_expires_with_its_lease() {
    let v = Valkey::start();
    let long = StateTtls {
        worker_lease: Duration::from_secs(60),
        ..fast_ttls()
    };
    let r1 = store(&v, "ex", "router-1", long.clone());
    let r2 = store(&v, "ex", "router-2", long);
    r1.heartbeat(M, &hb("w")).await.unwrap();
    r1.router_lease(M, Duration::from_secs(60)).await.unwrap();
    r2.router_lease(M, Duration::from_millis(800))
        .await
        .unwrap();
    r1.change_in_flight(M, "w", state::InFlight::requests(2))
        .await
        .unwrap();
    r2.change_in_flight(M, "w", state::InFlight::requests(3))
        .await
        .unwrap();
    let in_flight = |l: state::PrefixProbe| l.workers[0].info.in_flight;
    assert_eq!(in_flight(r1.probe(M, &[]).await.unwrap()), 5);
    // Decrements never go below zero.
    assert_eq!(
        r1.change_in_flight(M, "w", state::InFlight::requests(-5))
            .await
            .unwrap(),
        0
    );
    r1.change_in_flight(M, "w", state::InFlight::requests(2))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        in_flight(r1.probe(M, &[]).await.unwrap()),
        2,
        "router-2 crashed; its 3 must not count"
    );
    assert_eq!(r1.gc(M, 10).await.unwrap().dead_routers, 1);
    let view: Vec<String> = redis::cmd("HKEYS")
        .arg(format!("ex:{{{M}}}:view"))
        .query(&mut v.conn())
        .unwrap();
    assert!(
        !view.iter().any(|f| f.ends_with(":router-2")),
        "the dead router's counts are left: {view:?}"
    );
    assert!(view.iter().any(|f| f.ends_with(":router-1")));
}

#[tokio::test]
async fn a_router_restarted_under_the_same_id_drops_its_predecessors_counts() {
    let v = Valkey::start();
    let long = StateTtls {
        worker_lease: Duration::from_secs(60),
        ..StateTtls::default()
    };
    let before = store(&v, "ex", "pod-a", long.clone());
    let other = store(&v, "ex", "pod-b", long.clone());
    before.heartbeat(M, &hb("w")).await.unwrap();
    before
        .router_lease(M, Duration::from_secs(60))
        .await
        .unwrap();
    other
        .router_lease(M, Duration::from_secs(60))
        .await
        .unwrap();
    before
        .change_in_flight(M, "w", state::InFlight::requests(4))
        .await
        .unwrap();
    other
        .change_in_flight(M, "w", state::InFlight::requests(1))
        .await
        .unwrap();
    // Renewals by the same process keep its counts.
    before
        .router_lease(M, Duration::from_secs(60))
        .await
        .unwrap();
    let in_flight = |l: state::PrefixProbe| l.workers[0].info.in_flight;
    assert_eq!(in_flight(other.probe(M, &[]).await.unwrap()), 5);
    // "pod-a" crashes with 4 requests in flight and comes back under the
    // same id, with its lease still live: those 4 must not weigh on "w".
    drop(before);
    let after = store(&v, "ex", "pod-a", long);
    after
        .router_lease(M, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(in_flight(after.probe(M, &[]).await.unwrap()), 1);
    after
        .change_in_flight(M, "w", state::InFlight::requests(1))
        .await
        .unwrap();
    assert_eq!(in_flight(after.probe(M, &[]).await.unwrap()), 2);
}

#[tokio::test]
async fn long_chains_are_looked_up_in_chunks_with_the_same_answer() {
    use state::{BatchLimits, ConnectionSettings};
    let v = Valkey::start();
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(60),
        ..fast_ttls()
    };
    let whole = store(&v, "ch", "r1", ttls.clone());
    let small = BatchLimits {
        lookup_per_call: 7,
        ..BatchLimits::default()
    };
    let chunked =
        StateStore::new(ConnectionSettings::new(&v.url()), "ch", "r2", ttls, small).unwrap();
    // 400 blocks: 25 indexed ones (every 16th), so 4 lookup calls of 7.
    let chain: Vec<BlockHash> = (1..=400).map(BlockHash).collect();
    // a: the whole chain; b: 41 blocks (2 strides); c: blocks 1-200 and
    // 211-300 (a gap: the indexed block 208 is missing); d: exactly two
    // calls' worth (14 strides); e: nothing.
    let holdings: [(&str, Vec<BlockHash>); 5] = [
        ("a", chain.clone()),
        ("b", chain[..41].to_vec()),
        (
            "c",
            chain[..200]
                .iter()
                .chain(&chain[210..300])
                .copied()
                .collect(),
        ),
        ("d", chain[..224].to_vec()),
        ("e", vec![]),
    ];
    for (w, hs) in &holdings {
        whole.heartbeat(M, &hb(w)).await.unwrap();
        whole.stored(M, w, hs).await.unwrap();
    }
    let counts = |l: state::PrefixProbe| {
        let mut v: Vec<(String, usize)> = l
            .workers
            .into_iter()
            .map(|w| (w.info.worker_id, w.matched_blocks))
            .collect();
        v.sort();
        v
    };
    // Matches count whole strides of 16 blocks, up to the first missing
    // indexed block (protocol::index).
    let want: Vec<(String, usize)> = [("a", 400), ("b", 32), ("c", 192), ("d", 224), ("e", 0)]
        .iter()
        .map(|(w, n)| (w.to_string(), *n))
        .collect();
    assert_eq!(counts(whole.probe(M, &chain).await.unwrap()), want);
    assert_eq!(counts(chunked.probe(M, &chain).await.unwrap()), want);
}

/// A release (`release_in_flight`: a request's end, its prefill's end)
/// goes out in the next batch: not at once, but within a few flushes, for
/// the requests and the prefill tokens alike; and a store whose batch is
/// empty keeps its counts (nothing flushed twice).
#[tokio::test]
async fn a_release_reaches_the_shared_counts_with_the_next_batch() {
    let v = Valkey::start();
    let long = StateTtls {
        worker_lease: Duration::from_secs(60),
        ..fast_ttls()
    };
    let r = store(&v, "rel", "router-1", long);
    r.heartbeat(M, &hb("w")).await.unwrap();
    r.router_lease(M, Duration::from_secs(60)).await.unwrap();
    let counted = state::InFlight {
        requests: 3,
        prefill_tokens: 900,
    };
    r.change_in_flight(M, "w", counted).await.unwrap();
    let counts = |l: state::PrefixProbe| {
        (
            l.workers[0].info.in_flight,
            l.workers[0].info.prefill_tokens,
        )
    };
    assert_eq!(counts(r.probe(M, &[]).await.unwrap()), (3, 900));
    r.release_in_flight(M, "w", state::InFlight::prefill_tokens(-600))
        .unwrap();
    r.release_in_flight(M, "w", state::InFlight::requests(-2))
        .unwrap();
    let mut seen = (3, 900);
    for _ in 0..100 {
        seen = counts(r.probe(M, &[]).await.unwrap());
        if seen == (1, 300) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen, (1, 300), "the batched releases reached Valkey");
    // Idle flushes change nothing; the last request's release still goes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(counts(r.probe(M, &[]).await.unwrap()), (1, 300));
    r.release_in_flight(
        M,
        "w",
        state::InFlight {
            requests: -1,
            prefill_tokens: -300,
        },
    )
    .unwrap();
    for _ in 0..100 {
        seen = counts(r.probe(M, &[]).await.unwrap());
        if seen == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen, (0, 0));
}

/// A request's end, sent at once, carries its prefill's end queued at the
/// first byte: the shared counts are right when the call returns, in one
/// `change_in_flight` call rather than that call and a batch's.
#[tokio::test]
async fn a_requests_end_carries_its_queued_prefill_end() {
    let v = Valkey::start();
    let long = StateTtls {
        worker_lease: Duration::from_secs(60),
        ..fast_ttls()
    };
    let r = store(&v, "carry", "router-1", long);
    r.heartbeat(M, &hb("w")).await.unwrap();
    r.router_lease(M, Duration::from_secs(60)).await.unwrap();
    let counted = state::InFlight {
        requests: 1,
        prefill_tokens: 500,
    };
    r.change_in_flight(M, "w", counted).await.unwrap();
    let fcalls = || {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut v.conn())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    let before = fcalls();
    r.change_in_flight(M, "w", state::InFlight::prefill_tokens(-500))
        .await
        .unwrap();
    r.change_in_flight(M, "w", state::InFlight::requests(-1))
        .await
        .unwrap();
    let l = r.probe(M, &[]).await.unwrap();
    let counts = (
        l.workers[0].info.in_flight,
        l.workers[0].info.prefill_tokens,
    );
    assert_eq!(counts, (0, 0), "both ends are in Valkey at once");
    // Well past a flush: nothing was left for the batch.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fcalls() - before, 1, "one change_in_flight call");
}
