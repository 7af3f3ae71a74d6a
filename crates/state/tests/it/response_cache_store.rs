//! The response cache's store (`response_put.lua` and the entry reads)
//! against a real server: admission within the budget, expiry and its
//! accounting, sharded models. Also run against redis-server 7
//! (scripts/test.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use state::{ResponsePut, Sharding, StateError, StateStore, StateTtls};
use support::{Valkey, store};

const MODEL: &str = "Qwen/Qwen3-8B";

fn key(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn get(v: &Valkey, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(&mut v.conn()).unwrap()
}

#[tokio::test]
async fn entries_are_admitted_within_the_budget_and_expire() {
    let v = Valkey::start();
    let s = store(&v, "pr", "r", StateTtls::default());
    let ttl = Duration::from_millis(400);
    let (a, b) = (vec![b'a'; 100], vec![b'b'; 250]);
    assert_eq!(
        s.response_put(MODEL, &key(1), &a, ttl, 300).await.unwrap(),
        ResponsePut::Stored
    );
    assert_eq!(
        s.response_get(MODEL, &key(1)).await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(s.response_get(MODEL, &key(2)).await.unwrap(), None);
    // A live entry is left as it is.
    assert_eq!(
        s.response_put(MODEL, &key(1), &b, ttl, 300).await.unwrap(),
        ResponsePut::Exists
    );
    // 100 + 250 > 300: refused, nothing written.
    assert_eq!(
        s.response_put(MODEL, &key(2), &b, ttl, 300).await.unwrap(),
        ResponsePut::Full
    );
    assert_eq!(s.response_get(MODEL, &key(2)).await.unwrap(), None);
    let used = |v: &Valkey| get(v, "pr:{Qwen/Qwen3-8B}:rc_used");
    assert_eq!(used(&v).as_deref(), Some("100"));
    // Once the first has expired, its bytes are free again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(s.response_get(MODEL, &key(1)).await.unwrap(), None);
    assert_eq!(
        s.response_put(MODEL, &key(2), &b, Duration::from_secs(60), 300)
            .await
            .unwrap(),
        ResponsePut::Stored
    );
    assert_eq!(used(&v).as_deref(), Some("250"));
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg("pr:{Qwen/Qwen3-8B}:rc_expiry")
        .arg(0)
        .arg(-1)
        .query(&mut v.conn())
        .unwrap();
    assert_eq!(members, [key(2)]);
    // The accounting lives as long as its latest entry.
    let pttl: i64 = redis::cmd("PTTL")
        .arg("pr:{Qwen/Qwen3-8B}:rc_sizes")
        .query(&mut v.conn())
        .unwrap();
    assert!(pttl > 50_000, "{pttl}");
}

#[tokio::test]
async fn an_entry_deleted_under_its_accounting_is_stored_again() {
    let v = Valkey::start();
    let s = store(&v, "pr", "r", StateTtls::default());
    let ttl = Duration::from_secs(60);
    s.response_put(MODEL, &key(3), b"first", ttl, 10)
        .await
        .unwrap();
    // As a flush of the entry alone (or an operator's DEL) would leave it.
    let _: () = redis::cmd("DEL")
        .arg(format!("pr:{{{MODEL}}}:rc:{}", key(3)))
        .query(&mut v.conn())
        .unwrap();
    assert_eq!(
        s.response_put(MODEL, &key(3), b"second", ttl, 10)
            .await
            .unwrap(),
        ResponsePut::Stored,
        "the old accounting is dropped, not counted twice"
    );
    assert_eq!(get(&v, "pr:{Qwen/Qwen3-8B}:rc_used").as_deref(), Some("6"));
}

#[tokio::test]
async fn bad_keys_are_refused_before_valkey() {
    let v = Valkey::start();
    let s = store(&v, "pr", "r", StateTtls::default());
    for bad in ["", "ab", &"A".repeat(64), &"g".repeat(64)] {
        let err = s.response_get(MODEL, bad).await.unwrap_err();
        assert!(matches!(err, StateError::Invalid { .. }), "{bad}: {err}");
    }
    let err = s.response_get("a model", &key(1)).await.unwrap_err();
    assert!(matches!(err, StateError::Invalid { .. }), "{err}");
}

#[tokio::test]
async fn a_sharded_model_spreads_entries_and_splits_the_budget() {
    let v = Valkey::start();
    let s: StateStore = store(&v, "pr", "r", StateTtls::default());
    s.set_sharding(Sharding {
        shards: 3,
        ..Sharding::default()
    })
    .unwrap();
    let ttl = Duration::from_secs(60);
    let mut parts = std::collections::BTreeSet::new();
    for n in 0..12u8 {
        // 300 per model is 100 per part: 60 bytes fit once per part.
        let put = s.response_put(MODEL, &key(n), &[n; 60], ttl, 300).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("pr:{{{MODEL}#*}}:rc:{}", key(n)))
            .query(&mut v.conn())
            .unwrap();
        match put.unwrap() {
            ResponsePut::Stored => {
                assert_eq!(keys.len(), 1);
                assert!(parts.insert(keys[0].split('}').next().unwrap().to_owned()));
                assert_eq!(
                    s.response_get(MODEL, &key(n)).await.unwrap(),
                    Some(vec![n; 60])
                );
            }
            ResponsePut::Full => assert!(keys.is_empty()),
            ResponsePut::Exists => panic!("a new key"),
        }
    }
    assert_eq!(parts.len(), 3, "each part stored one entry: {parts:?}");
}
