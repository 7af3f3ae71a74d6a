//! Restarts with real processes: a router killed with SIGKILL, Valkey
//! restarted empty, and scripts flushed from under a running store.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use protocol::hashing::BlockHash;
use serde_json::{Value, json};
use state::{StateTtls, WorkerHeartbeat};
use support::router_process::RouterProcess;
use support::{Valkey, store};

const M: &str = "m";

#[tokio::test]
async fn the_state_outlives_a_killed_router() {
    let v = Valkey::start();
    let first = RouterProcess::start(&v.url(), &[]).await;
    let (st, _) = first
        .post(
            "/internal/heartbeat",
            json!({"worker_id": "w", "url": "http://127.0.0.1:9", "model": M}),
        )
        .await;
    assert_eq!(st, 200);
    let (st, _) = first
        .post(
            "/internal/stored",
            json!({"worker_id": "w", "block_hashes": [1, 2, 3]}),
        )
        .await;
    assert_eq!(st, 200);
    drop(first); // SIGKILL
    let second = RouterProcess::start(&v.url(), &[]).await;
    let listing: Value = serde_json::from_str(&second.get("/admin/workers").await).unwrap();
    assert_eq!(listing["workers"][0]["worker_id"], "w");
    assert_eq!(listing["workers"][0]["blocks"], 3);
    // The new router accepts the worker's reports without re-registration.
    let (st, body) = second
        .post(
            "/internal/eviction",
            json!({"worker_id": "w", "evicted_hashes": [3]}),
        )
        .await;
    assert_eq!((st, body["removed"].as_u64()), (200, Some(1)));
    let s = store(&v, "pr", "probe", StateTtls::default());
    let l = s
        .probe(M, &[BlockHash(1), BlockHash(2), BlockHash(3)])
        .await
        .unwrap();
    assert_eq!(l.workers[0].matched_blocks, 2);
}

#[tokio::test]
async fn after_valkey_restarts_empty_the_next_heartbeats_and_syncs_rebuild_the_state() {
    let mut v = Valkey::start();
    let r = RouterProcess::start(&v.url(), &[]).await;
    let register = json!({"worker_id": "w", "url": "http://127.0.0.1:9", "model": M});
    assert_eq!(r.post("/internal/heartbeat", register.clone()).await.0, 200);
    assert_eq!(
        r.post(
            "/internal/sync",
            json!({"worker_id": "w", "active_hashes": [1, 2, 3]})
        )
        .await
        .0,
        200
    );
    v.restart(); // no persistence: empty, and without our scripts
    // The worker's lease is gone with the data: its reports are refused...
    let mut status = 0;
    for _ in 0..50 {
        status = r
            .post(
                "/internal/stored",
                json!({"worker_id": "w", "model": M, "block_hashes": [4]}),
            )
            .await
            .0;
        if status != 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 404);
    // ...until its next heartbeat re-registers it, and its next sync restores it.
    let (st, body) = r.post("/internal/heartbeat", register).await;
    assert_eq!((st, body["registered"].as_bool()), (200, Some(true)));
    let (st, body) = r
        .post(
            "/internal/sync",
            json!({"worker_id": "w", "active_hashes": [1, 2, 3, 4]}),
        )
        .await;
    assert_eq!((st, body["active"].as_u64()), (200, Some(4)));
    let s = store(&v, "pr", "probe", StateTtls::default());
    let chain: Vec<BlockHash> = (1..=4).map(BlockHash).collect();
    assert_eq!(
        s.probe(M, &chain).await.unwrap().workers[0].matched_blocks,
        4
    );
    // The library was reloaded transparently after "Function not found".
    let metrics = r.get("/metrics").await;
    assert!(
        metrics.contains("prefix_router_script_reloads_total"),
        "no reload recorded"
    );
}

#[tokio::test]
async fn scripts_reload_transparently_after_function_flush() {
    let v = Valkey::start();
    let s = store(&v, "pr", "r1", StateTtls::default());
    let hb = WorkerHeartbeat {
        worker_id: "w".into(),
        url: "http://127.0.0.1:9".into(),
        load: None,
    };
    s.heartbeat(M, &hb).await.unwrap();
    s.claim(M, "w", &[BlockHash(1)]).await.unwrap();
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut v.conn())
        .unwrap();
    // Both a write script (FCALL) and a read-only one (FCALL_RO).
    assert_eq!(s.claim(M, "w", &[BlockHash(2)]).await.unwrap(), 1);
    let l = s.probe(M, &[BlockHash(1), BlockHash(2)]).await.unwrap();
    assert_eq!(l.workers[0].matched_blocks, 2);
}
