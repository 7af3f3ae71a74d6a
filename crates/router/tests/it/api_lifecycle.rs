//! The worker push API over real HTTP, across the life of a fleet:
//! Valkey outages, chunked syncs, drains, concurrent routers, shared Valkey.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use protocol::hashing::BlockHash;
use serde_json::json;
use state::StateTtls;
use support::{M, Router, TOKEN, Valkey, args, free_port, http, post, raw_state, register, store};

#[tokio::test]
async fn valkey_down_gives_503_and_the_router_reconnects_by_itself() {
    let port = free_port().unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let r = Router::start(&url, args()).await;
    assert_eq!(
        http()
            .get(r.url("/health"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        http()
            .get(r.url("/ready"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        503
    );
    let (st, body) = post(
        &r,
        "/internal/heartbeat",
        &json!({"worker_id": "w", "url": "http://x", "model": M}),
    )
    .await;
    assert_eq!(st, 503, "{body}");
    assert_eq!(body["error"]["type"], "state_unavailable");
    // Valkey comes up on that port: the same router recovers without help.
    let _v = Valkey::start_on(port, &["--save", "", "--appendonly", "no"]);
    let mut recovered = false;
    for _ in 0..100 {
        let (st, _) = post(
            &r,
            "/internal/heartbeat",
            &json!({"worker_id": "w", "url": "http://x", "model": M}),
        )
        .await;
        if st == 200 {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "router did not reconnect within 10 s");
    assert_eq!(
        http()
            .get(r.url("/ready"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    r.stop().await;
}

#[tokio::test]
async fn a_sync_sent_in_chunks_changes_nothing_until_its_last_chunk() {
    let v = Valkey::start();
    let r = Router::start(&v.url(), args()).await;
    register(&r, "w").await;
    post(
        &r,
        "/internal/stored",
        &json!({"worker_id": "w", "block_hashes": [1, 2, 3]}),
    )
    .await;
    let before = raw_state(&v, "pr", M);
    let (st, body) = post(
        &r,
        "/internal/sync",
        &json!({"worker_id": "w", "active_hashes": [3, 4], "sync_id": "s-1", "last": false}),
    )
    .await;
    assert_eq!((st, body["staged"].as_u64()), (202, Some(2)));
    assert_eq!(
        raw_state(&v, "pr", M),
        before,
        "a staged chunk became visible"
    );
    let (st, body) = post(
        &r,
        "/internal/sync",
        &json!({"worker_id": "w", "active_hashes": ["0000000000000005"], "sync_id": "s-1"}),
    )
    .await;
    assert_eq!((st, body["active"].as_u64()), (200, Some(3)), "{body}");
    let held: Vec<String> = raw_state(&v, "pr", M).forward.keys().cloned().collect();
    let want: Vec<String> = [3u64, 4, 5]
        .iter()
        .map(|h| BlockHash(*h).to_hex())
        .collect();
    assert_eq!(held, want);
    r.stop().await;
}

#[tokio::test]
async fn deregistering_drains_at_once_and_purges_in_the_background() {
    let v = Valkey::start();
    let r = Router::start(&v.url(), args()).await;
    register(&r, "w").await;
    let hashes: Vec<u64> = (1..=2000).collect();
    post(
        &r,
        "/internal/stored",
        &json!({"worker_id": "w", "block_hashes": hashes}),
    )
    .await;
    let resp = http()
        .delete(r.url("/internal/workers/w"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let s = store(&v, "pr", "probe", StateTtls::default());
    assert!(
        s.probe(M, &[BlockHash(1)])
            .await
            .unwrap()
            .workers
            .is_empty(),
        "drained worker still routable"
    );
    let mut purged = false;
    for _ in 0..50 {
        if raw_state(&v, "pr", M).forward.is_empty() {
            purged = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(purged, "entries of a deregistered worker were not purged");
    let again = http()
        .delete(r.url("/internal/workers/w"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 404);
    r.stop().await;
}

#[tokio::test]
async fn several_routers_applying_batches_for_one_worker_stay_consistent() {
    let v = Valkey::start();
    let mut routers = Vec::new();
    for _ in 0..3 {
        routers.push(Router::start(&v.url(), args()).await);
    }
    register(&routers[0], "w").await;
    // Each router stores its own range, then evicts its odd hashes, while
    // the others do the same; some ranges overlap.
    let mut tasks = Vec::new();
    for (i, r) in routers.iter().enumerate() {
        let url = r.url("");
        tasks.push(tokio::spawn(async move {
            let base = i as u64 * 3000;
            for round in 0..10u64 {
                let batch: Vec<u64> = (base + round * 400..base + round * 400 + 400).collect();
                let odd: Vec<u64> = batch.iter().copied().filter(|h| h % 2 == 1).collect();
                for (path, field, hs) in [
                    ("internal/stored", "block_hashes", &batch),
                    ("internal/eviction", "evicted_hashes", &odd),
                ] {
                    let resp = http()
                        .post(format!("{url}/{path}"))
                        .bearer_auth(TOKEN)
                        .json(&json!({"worker_id": "w", field: hs}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(resp.status().as_u16(), 200);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let raw = raw_state(&v, "pr", M);
    assert_eq!(raw.forward_pairs(), raw.reverse_pairs());
    let want: std::collections::BTreeSet<String> = (0..3u64)
        .flat_map(|i| i * 3000..i * 3000 + 4000)
        .filter(|h| h % 2 == 0)
        .map(|h| BlockHash(h).to_hex())
        .collect();
    let got: std::collections::BTreeSet<String> = raw.forward.keys().cloned().collect();
    assert_eq!(got, want);
    for r in routers {
        r.stop().await;
    }
}

#[tokio::test]
async fn fleets_with_different_key_prefixes_share_one_valkey_without_interfering() {
    let v = Valkey::start();
    let mut a = args();
    a.key_prefix = Some("fleet-a".into());
    let mut b = args();
    b.key_prefix = Some("fleet-b".into());
    let (ra, rb) = (
        Router::start(&v.url(), a).await,
        Router::start(&v.url(), b).await,
    );
    for (r, hashes) in [(&ra, vec![1, 2]), (&rb, vec![3])] {
        register(r, "w").await;
        post(
            r,
            "/internal/stored",
            &json!({"worker_id": "w", "block_hashes": hashes}),
        )
        .await;
    }
    post(
        &rb,
        "/internal/sync",
        &json!({"worker_id": "w", "active_hashes": [4]}),
    )
    .await;
    let keys = |prefix| {
        raw_state(&v, prefix, M)
            .forward
            .keys()
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys("fleet-a"),
        vec![BlockHash(1).to_hex(), BlockHash(2).to_hex()]
    );
    assert_eq!(keys("fleet-b"), vec![BlockHash(4).to_hex()]);
    ra.stop().await;
    rb.stop().await;
}
