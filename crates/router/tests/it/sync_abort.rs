//! A chunked sync whose chunk was refused is aborted (issue 30, defect 7):
//! its later chunks and its commit are refused, and the worker's blocks
//! stay as they were, on a real valkey-server, through the store (a
//! snapshot over the cap, refused by `sync_stage.lua` itself) and through a
//! router's push API (a chunk whose tiers do not match its hashes).

use crate::support;

use std::time::Duration;

use protocol::hashing::BlockHash;
use serde_json::json;
use state::{BatchLimits, ConnectionSettings, StateError, StateStore, StateTtls};
use support::{M, Router, Valkey, args, post, raw_state, register, register_in};

fn hashes(range: std::ops::Range<u64>) -> Vec<BlockHash> {
    range.map(BlockHash).collect()
}

/// The hashes worker `w` holds in the forward map.
fn held(v: &Valkey, prefix: &str) -> usize {
    raw_state(v, prefix, M).forward.len()
}

#[tokio::test]
async fn a_snapshot_refused_as_too_large_is_never_committed() {
    let v = Valkey::start();
    let limits = BatchLimits {
        max_sync_hashes: 100,
        stage_per_call: 32,
        ..BatchLimits::default()
    };
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(120),
        ..StateTtls::default()
    };
    let s = StateStore::new(ConnectionSettings::new(&v.url()), "sa", "r1", ttls, limits).unwrap();
    register_in(&s, "w").await;
    s.stored(M, "w", &hashes(1..11)).await.unwrap();
    assert_eq!(held(&v, "sa"), 10);

    assert_eq!(
        s.sync_stage(M, "w", "big", &hashes(100..160))
            .await
            .unwrap(),
        60
    );
    let refused = s.sync_stage(M, "w", "big", &hashes(200..260)).await;
    assert!(
        matches!(
            refused,
            Err(StateError::Invalid {
                what: "active_hashes",
                ..
            })
        ),
        "{refused:?}"
    );
    // A later chunk and the commit of the aborted sync are refused.
    let later = s.sync_stage(M, "w", "big", &hashes(300..301)).await;
    assert!(
        matches!(later, Err(StateError::SyncAborted { .. })),
        "{later:?}"
    );
    let commit = s.sync_stage(M, "w", "big", &[]).await;
    assert!(
        matches!(commit, Err(StateError::SyncAborted { .. })),
        "{commit:?}"
    );
    let commit = s.sync_commit(M, "w", "big").await;
    assert!(
        matches!(commit, Err(StateError::SyncAborted { .. })),
        "{commit:?}"
    );
    assert_eq!(held(&v, "sa"), 10, "the worker's blocks are untouched");

    // A new sync under a new id goes through.
    assert_eq!(
        s.sync_stage(M, "w", "next", &hashes(1..6)).await.unwrap(),
        5
    );
    assert_eq!(s.sync_commit(M, "w", "next").await.unwrap().active, 5);
    assert_eq!(held(&v, "sa"), 5);
}

#[tokio::test]
async fn a_chunk_refused_by_the_push_api_aborts_its_sync() {
    let v = Valkey::start();
    let mut a = args();
    a.worker_lease = Some(Duration::from_secs(120));
    let r = Router::start(&v.url(), a).await;
    register(&r, "w").await;
    let held_before: Vec<u64> = (1..=8).collect();
    let (st, body) = post(
        &r,
        "/internal/stored",
        &json!({"worker_id": "w", "model": M, "block_hashes": held_before}),
    )
    .await;
    assert_eq!(st, 200, "{body}");
    let chunk = |hashes: Vec<u64>, last: bool| {
        json!({"worker_id": "w", "model": M, "sync_id": "s1", "last": last,
            "active_hashes": hashes})
    };
    let (st, body) = post(&r, "/internal/sync", &chunk((100..140).collect(), false)).await;
    assert_eq!(st, 202, "{body}");
    // A chunk whose tiers do not match its hashes: refused, and the sync
    // with it.
    let mut bad = chunk((200..240).collect(), false);
    bad["tiers"] = json!(["cpu"]);
    let (st, body) = post(&r, "/internal/sync", &bad).await;
    assert_eq!(st, 400, "{body}");
    let mut bad_families = chunk((200..240).collect(), false);
    bad_families["families"] = json!([null]);
    let (st, body) = post(&r, "/internal/sync", &bad_families).await;
    assert_eq!(st, 400, "{body}");
    // The commit, empty as in the issue, is refused: nothing replaced.
    let (st, body) = post(&r, "/internal/sync", &chunk(Vec::new(), true)).await;
    assert_eq!(st, 409, "{body}");
    assert_eq!(body["error"]["type"], "sync_aborted", "{body}");
    assert_eq!(held(&v, "pr"), 8, "the worker's blocks are untouched");
    r.stop().await;
}
