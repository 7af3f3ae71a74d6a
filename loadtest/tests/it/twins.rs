//! The fault-free twin check ([`loadtest::twins`]) on a tiny real fleet
//! (Valkey, a router, one deterministic sim): answers sent again equal
//! their first answers; one whose recorded text or token count differs
//! from its twin's is counted as differing, so a move that lost or
//! repeated a token cannot pass. Only the answers in flight on a worker
//! when it stopped are touched.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::time::Duration;

use loadtest::client::{Client, completion_body};
use loadtest::metrics::Sample;
use loadtest::topology::{Arm, Fleet, FleetSpec};
use loadtest::twins::{self, Exchange};
use loadtest::workload::Api;
use serde_json::json;

use crate::common::tiny_runner;

fn sample(start_s: f64, end_s: f64, worker: Option<String>, completion_tokens: u64) -> Sample {
    Sample {
        start_s,
        end_s,
        error: None,
        ttft_ms: None,
        e2e_ms: (end_s - start_s) * 1e3,
        prompt_tokens: 0,
        cached_tokens: None,
        completion_tokens,
        worker,
        turn: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_differs_from_its_twin_is_counted() {
    let out = tempfile::tempdir().expect("tempdir");
    let arm = Arm::parse("cache_aware:1", 1, Duration::from_secs(60), &[]).expect("arm");
    let runner = tiny_runner(out.path(), &arm, 1, 0);
    let fleet = Fleet::start(FleetSpec {
        dir: out.path().join("logs"),
        ..runner.base.clone()
    })
    .await
    .expect("fleet");
    let client = Client::new(&fleet.url(), Duration::from_secs(20)).unwrap();
    let mut samples = Vec::new();
    let mut exchanges = Vec::new();
    for (i, words) in ["alpha beta gamma", "delta epsilon zeta"]
        .iter()
        .enumerate()
    {
        let body = completion_body("qwen3", json!(words.repeat(20)), 12, true);
        let o = client.send(Api::Completions, &body).await;
        assert!(o.ok(), "{:?}", o.error);
        assert_eq!(o.completion_tokens, 12);
        samples.push(sample(i as f64, i as f64 + 1.0, o.worker.clone(), 12));
        exchanges.push(Exchange {
            api: Api::Completions,
            body,
            answer: o.answer,
        });
    }
    let all = [0, 1];
    let same = twins::check(&client, &samples, &exchanges, &all).await;
    assert_eq!((same.equal, same.touched), (2, 2), "{same:?}");
    assert!(same.differing.is_empty());
    // One token lost at a move: the text is shorter.
    let mut lost = exchanges.clone();
    let cut = lost[1].answer.rfind(' ').unwrap();
    lost[1].answer.truncate(cut);
    let check = twins::check(&client, &samples, &lost, &all).await;
    assert_eq!((check.equal, check.touched), (1, 2), "{check:?}");
    assert_eq!(check.differing.len(), 1, "{check:?}");
    // The same text with a token counted twice.
    let mut counted = samples.clone();
    counted[0].completion_tokens = 13;
    let check = twins::check(&client, &counted, &exchanges, &all).await;
    assert_eq!(check.equal, 1, "{check:?}");
    fleet.stop().await;

    // Touched: in flight on the stopped worker when it stopped.
    let w = |id: &str| Some(id.to_owned());
    let runs = [
        sample(0.0, 2.0, w("a"), 1),
        sample(0.0, 2.0, w("b"), 1),
        sample(1.5, 3.0, w("a"), 1),
        sample(0.0, 0.5, w("a"), 1),
    ];
    assert_eq!(twins::touched(&runs, &[("a".into(), 1.0)]), vec![0]);
}
