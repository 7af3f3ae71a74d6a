//! Graceful drain (`drain.lua`, `drains.lua`): a draining worker is out of
//! routing (the atomic route and the probe) but keeps its lease and its
//! reports; the mark is cleared by an undrain or a new incarnation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use protocol::hashing::BlockHash;
use state::{RouteParams, ScriptName, StateError, StateStore, StateTtls, WorkerHeartbeat};
use support::{M, Valkey, call_script, fast_ttls, store};

fn hb(id: &str) -> WorkerHeartbeat {
    WorkerHeartbeat {
        worker_id: id.into(),
        url: format!("http://127.0.0.1:9/{id}"),
        load: None,
    }
}

fn chain() -> Vec<BlockHash> {
    (1..=4u64).map(|i| BlockHash(0xd000 + i)).collect()
}

/// A store whose leases outlive the test, with `w1` holding the chain
/// (so that routing prefers it) and `w2` holding nothing.
async fn fleet(v: &Valkey, prefix: &str) -> StateStore {
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(60),
        ..fast_ttls()
    };
    let s = store(v, prefix, "r1", ttls);
    for w in ["w1", "w2"] {
        s.heartbeat(M, &hb(w)).await.unwrap();
    }
    s.stored(M, "w1", &chain()).await.unwrap();
    s
}

/// The worker the atomic route chooses for the chain (and counts).
async fn routed(s: &StateStore) -> Option<String> {
    let out = s
        .route_chain(M, &chain(), &RouteParams::default(), &[])
        .await
        .unwrap();
    out.chosen
        .map(|i| out.lookup.workers[i].info.worker_id.clone())
}

async fn probed(s: &StateStore) -> Vec<String> {
    let p = s.probe(M, &chain()).await.unwrap();
    p.workers.into_iter().map(|w| w.info.worker_id).collect()
}

async fn status(s: &StateStore, id: &str) -> Vec<String> {
    let all = s.workers(M).await.unwrap();
    all.into_iter()
        .filter(|w| w.info.worker_id == id)
        .map(|w| w.status)
        .collect()
}

#[tokio::test]
async fn a_draining_worker_gets_nothing_new_but_keeps_its_lease_and_reports() {
    let v = Valkey::start();
    let s = fleet(&v, "dr1").await;
    assert_eq!(
        routed(&s).await.as_deref(),
        Some("w1"),
        "w1 holds the chain"
    );

    let left = s.drain(M, "w1", Duration::from_secs(30)).await.unwrap();
    let left = left.expect("w1 is live");
    assert!(left <= Duration::from_secs(30) && left > Duration::from_secs(25));
    for _ in 0..10 {
        assert_eq!(routed(&s).await.as_deref(), Some("w2"));
    }
    assert_eq!(probed(&s).await, ["w2"]);
    assert_eq!(status(&s, "w1").await, ["draining"]);
    assert_eq!(status(&s, "w2").await, ["live"]);

    // Its heartbeats and reports still land, and keep the mark.
    let lease = s.heartbeat(M, &hb("w1")).await.unwrap();
    assert!(
        !lease.new,
        "a heartbeat while draining keeps the incarnation"
    );
    s.stored(M, "w1", &[BlockHash(0xe001)]).await.unwrap();
    assert_eq!(routed(&s).await.as_deref(), Some("w2"));
    let drains = s.drains(M).await.unwrap();
    assert_eq!(drains.len(), 1);
    assert_eq!(drains[0].worker_id, "w1");
    assert_eq!(drains[0].url, "http://127.0.0.1:9/w1");
    assert!(drains[0].left <= left);

    // With every worker draining, routing has no worker at all.
    s.drain(M, "w2", Duration::ZERO).await.unwrap();
    assert_eq!(routed(&s).await, None);
    assert!(probed(&s).await.is_empty());
    let drains = s.drains(M).await.unwrap();
    let w2 = drains.iter().find(|d| d.worker_id == "w2").unwrap();
    assert_eq!(w2.left, Duration::ZERO);
}

#[tokio::test]
async fn an_undrained_or_reregistered_worker_is_routed_to_again() {
    let v = Valkey::start();
    let s = fleet(&v, "dr2").await;
    s.drain(M, "w1", Duration::from_secs(30)).await.unwrap();
    assert_eq!(routed(&s).await.as_deref(), Some("w2"));

    assert!(s.undrain(M, "w1").await.unwrap());
    assert_eq!(routed(&s).await.as_deref(), Some("w1"));
    assert_eq!(status(&s, "w1").await, ["live"]);
    assert!(s.drains(M).await.unwrap().is_empty());

    // Drained, then deregistered and back (a restarted worker): a new
    // incarnation, without the mark.
    s.drain(M, "w1", Duration::from_secs(30)).await.unwrap();
    assert!(s.deregister(M, "w1").await.unwrap());
    let lease = s.heartbeat(M, &hb("w1")).await.unwrap();
    assert!(lease.new);
    s.stored(M, "w1", &chain()).await.unwrap();
    assert_eq!(routed(&s).await.as_deref(), Some("w1"));
    assert!(probed(&s).await.contains(&"w1".to_owned()));
    assert!(s.drains(M).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_drain_keeps_the_earlier_deadline_and_refuses_bad_ones() {
    let v = Valkey::start();
    let s = fleet(&v, "dr3").await;
    s.drain(M, "w1", Duration::from_secs(10)).await.unwrap();
    let left = s.drain(M, "w1", Duration::from_secs(600)).await.unwrap();
    assert!(left.unwrap() <= Duration::from_secs(10), "{left:?}");

    // Unknown workers: nothing marked.
    assert_eq!(
        s.drain(M, "nobody", Duration::from_secs(1)).await.unwrap(),
        None
    );
    assert!(!s.undrain(M, "nobody").await.unwrap());
    let too_long = s.drain(M, "w2", Duration::from_secs(2 * 86_400)).await;
    assert!(
        matches!(too_long, Err(StateError::Invalid { .. })),
        "{too_long:?}"
    );

    // The script itself refuses what is not a whole number of ms >= -1.
    let mut conn = v.client().get_multiplexed_async_connection().await.unwrap();
    for bad in ["abc", "-2", "1.5", "nan", ""] {
        let (base, ids) = ("dr3:{m}".to_owned(), "dr3:{m}:ids".to_owned());
        let reply: Result<(u64, i64), _> = state::ScriptSet::new()
            .call(
                &mut conn,
                ScriptName::Drain,
                &[&ids],
                &[base.as_bytes(), b"w2", bad.as_bytes()],
            )
            .await;
        assert!(reply.is_err(), "{bad:?} accepted: {reply:?}");
    }
    let (idx, left): (u64, i64) =
        call_script(&mut conn, "dr3", M, ScriptName::Drain, &[b"w2", b"-1"]).await;
    assert!(idx > 0);
    assert_eq!(left, -1);
    assert_eq!(routed(&s).await.as_deref(), Some("w2"));
}
