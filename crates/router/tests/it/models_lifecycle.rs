//! Models are forgotten and capped: a model whose workers are all gone is
//! removed with every key it had once `--model-grace` has passed, so per
//! model work (every router's lease and gc, every second) follows the live
//! models; and a worker of one model more than `--max-models` is refused
//! with a clear 429, writing nothing. Before, 10,000 junk models kept an
//! idle fleet's Valkey at 44% of a core, forever.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Router, Valkey, args, post};

fn keys(v: &Valkey, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut v.conn())
        .unwrap()
}

fn models(v: &Valkey) -> Vec<String> {
    let mut m: Vec<String> = redis::cmd("SMEMBERS")
        .arg("pr:models")
        .query(&mut v.conn())
        .unwrap();
    m.sort();
    m
}

fn heartbeat(worker: &str, model: &str) -> serde_json::Value {
    json!({"worker_id": worker, "url": "http://10.0.0.1:8000", "model": model})
}

#[tokio::test]
async fn a_model_past_the_cap_is_refused_and_writes_nothing() {
    let valkey = Valkey::start();
    let mut a = args();
    a.max_models = Some(3);
    let r = Router::start(&valkey.url(), a).await;
    for m in ["m1", "m2", "m3"] {
        let (st, body) = post(&r, "/internal/heartbeat", &heartbeat(&format!("w-{m}"), m)).await;
        assert_eq!(st, 200, "{m}: {body}");
    }
    let (st, body) = post(&r, "/internal/heartbeat", &heartbeat("w-m4", "m4")).await;
    assert_eq!(st, 429, "{body}");
    assert_eq!(body["error"]["type"], "too_many_models");
    assert_eq!(body["error"]["code"], 429);
    assert!(keys(&valkey, "pr:{m4}:*").is_empty());
    assert_eq!(models(&valkey), ["m1", "m2", "m3"]);
    // Known models keep working; a second worker of one of them too.
    let (st, _) = post(&r, "/internal/heartbeat", &heartbeat("w-m1", "m1")).await;
    assert_eq!(st, 200);
    let (st, _) = post(&r, "/internal/heartbeat", &heartbeat("w2-m1", "m1")).await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn a_model_without_workers_is_forgotten_with_its_keys() {
    let valkey = Valkey::start();
    let mut a = args();
    a.model_grace = Some(Duration::from_millis(500));
    a.worker_lease = Some(Duration::from_millis(600));
    a.gc_interval = Some(Duration::from_millis(100));
    let r = Router::start(&valkey.url(), a).await;
    for m in ["junk", "kept"] {
        let (st, _) = post(&r, "/internal/heartbeat", &heartbeat(&format!("w-{m}"), m)).await;
        assert_eq!(st, 200);
    }
    assert!(!keys(&valkey, "pr:{junk}:*").is_empty());
    // `kept` keeps heartbeating; `junk` stops. Forgetting ends with its
    // workers' entries in `worker_model` (after `models`): wait for all.
    let worker_models = || -> Vec<String> {
        redis::cmd("HKEYS")
            .arg("pr:worker_model")
            .query(&mut valkey.conn())
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (st, _) = post(&r, "/internal/heartbeat", &heartbeat("w-kept", "kept")).await;
        assert_eq!(st, 200);
        if models(&valkey) == ["kept"]
            && keys(&valkey, "pr:{junk}:*").is_empty()
            && worker_models() == ["w-kept"]
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "junk not forgotten: models {:?}, keys {:?}, workers {:?}",
            models(&valkey),
            keys(&valkey, "pr:{junk}:*"),
            worker_models()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!keys(&valkey, "pr:{kept}:*").is_empty());
    // The model can come back.
    let (st, body) = post(&r, "/internal/heartbeat", &heartbeat("w-junk", "junk")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["registered"], true);
    assert_eq!(models(&valkey), ["junk", "kept"]);
}
