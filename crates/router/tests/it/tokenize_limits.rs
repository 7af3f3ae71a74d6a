//! Tokenizing cannot stall the router: prompts are tokenized off the async
//! workers, large ones in a bounded lane that refuses (503
//! `tokenizer_busy`) rather than queueing without end, small ones in a lane
//! of their own; a prompt over `--max-prompt-tokens` is refused after about
//! the limit's worth of tokenizing. Before, one 10.5 MB prompt held a
//! request task for 5.5 s before its 413, and four made `/health` take 5 s.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::fake_worker::FakeWorker;
use support::{M, Router, Valkey, args, get, http, post, tokenizer_dir};

async fn fleet(
    configure: impl FnOnce(&mut prefix_router::ServeArgs),
) -> (Valkey, Router, FakeWorker) {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(M.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    // Debug builds on 2 shared cores tokenize a large prompt for longer
    // than the default lease: the worker must outlast it.
    a.worker_lease = Some(Duration::from_secs(600));
    configure(&mut a);
    let r = Router::start(&valkey.url(), a).await;
    let worker = FakeWorker::start("w0").await;
    let hb = json!({"worker_id": "w0", "url": worker.url(), "model": M});
    assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);
    (valkey, r, worker)
}

async fn complete(r: &Router, prompt: &str) -> (u16, Value) {
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&json!({"model": M, "prompt": prompt, "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

async fn in_flight(r: &Router) -> u64 {
    let (_, v) = get(r, &format!("/admin/workers?model={M}")).await;
    v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["in_flight"].as_u64().unwrap())
        .sum()
}

fn huge(bytes: usize) -> String {
    "All work and no play makes Jack a dull boy. ".repeat(bytes / 44)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_limit_is_refused_before_it_is_tokenized_in_full() {
    let (_v, r, worker) = fleet(|a| a.exposure.max_prompt_tokens = Some(1_000)).await;
    let (status, body) = complete(&r, &huge(4 << 20)).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["type"], "prompt_too_long");
    // The count it gives is where the encoder stopped, far below the
    // prompt's ~1 M tokens.
    let message = body["error"]["message"].as_str().unwrap();
    let counted: u64 = message
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap();
    assert!(counted > 1_000 && counted < 100_000, "{message}");
    assert_eq!(worker.hits(), 0);
    assert_eq!(in_flight(&r).await, 0);
}

/// The two numbers of a 413's message: (tokens counted, limit).
fn counted_and_max(body: &Value) -> (u64, u64) {
    let message = body["error"]["message"].as_str().unwrap();
    let numbers: Vec<u64> = message
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_limit_is_the_models_context_and_a_huge_prompt_is_refused_by_its_length() {
    // No --max-prompt-tokens: the Qwen3 files' context, 131,072 tokens
    // (tokenizer_config.json's model_max_length).
    let (_v, r, worker) = fleet(|_| {}).await;
    let prompt = "hello ".repeat(10_500_000 / 6);
    let (status, body) = complete(&r, &prompt).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["type"], "prompt_too_long");
    // Refused from its length, not counted: the bound is its bytes over
    // the longest token it may hold (none of Qwen3's over 32 bytes occurs
    // in it), not a count that stopped past the limit.
    assert_eq!(
        counted_and_max(&body),
        (prompt.len().div_ceil(32) as u64, 131_072)
    );
    // A prompt within the context is routed.
    let (status, body) = complete(&r, &"hello ".repeat(20_000)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(worker.hits(), 1);
}

/// A copy of the Qwen3 tokenizer whose files give a context of `context`
/// tokens.
fn tokenizer_with_context(context: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = tokenizer_dir();
    std::fs::copy(
        from.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(from.join("tokenizer_config.json")).unwrap())
            .unwrap();
    config["model_max_length"] = context.into();
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_context_comes_from_the_models_files_and_an_explicit_limit_wins() {
    let small = tokenizer_with_context(1_000);
    let (_v, r, worker) = fleet(|a| a.tokenizer_dir = Some(small.path().to_owned())).await;
    let (status, body) = complete(&r, &"hello ".repeat(900)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = complete(&r, &"hello ".repeat(3_000)).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(counted_and_max(&body).1, 1_000);
    assert_eq!(worker.hits(), 1);
    // --max-prompt-tokens wins, above the context or below it.
    let (_v, r, _) = fleet(|a| {
        a.tokenizer_dir = Some(small.path().to_owned());
        a.exposure.max_prompt_tokens = Some(5_000);
    })
    .await;
    let (status, body) = complete(&r, &"hello ".repeat(3_000)).await;
    assert_eq!(status, 200, "{body}");
    let (_v, r, _) = fleet(|a| a.exposure.max_prompt_tokens = Some(500)).await;
    let (status, body) = complete(&r, &"hello ".repeat(900)).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(counted_and_max(&body).1, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_lane_refuses_at_once_and_small_requests_still_pass() {
    let (_v, r, worker) = fleet(|a| {
        a.exposure.tokenize_threads = Some(1);
        a.exposure.tokenize_queue = Some(0);
        a.exposure.max_prompt_tokens = Some(50_000_000);
    })
    .await;
    let r = std::sync::Arc::new(r);
    // A large prompt occupies the only large-lane thread for seconds.
    // Under the fake worker's 2 MB body limit.
    let big = huge(1_900_000);
    let first = tokio::spawn({
        let (r, big) = (r.clone(), big.clone());
        async move { complete(&r, &big).await }
    });
    // The first holds the lane (its body sent and read, its job started)
    // before the second is sent: else the second could take the lane first.
    let mut held = false;
    for _ in 0..200 {
        let metrics = http().get(r.url("/metrics")).send().await.unwrap();
        let text = metrics.text().await.unwrap();
        if text
            .lines()
            .any(|l| l.starts_with("prefix_router_cpu_pool_running{lane=\"large\"} 1"))
        {
            held = true;
            break;
        }
        assert!(!first.is_finished(), "the first prompt finished unseen");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(held, "the first prompt never held the large lane");
    // Another large one is refused at once while the first one runs, and
    // the router keeps answering small requests meanwhile.
    let mut refused = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (status, body) = complete(&r, &big).await;
        if status == 503 {
            refused = Some(body);
            break;
        }
        assert!(
            !first.is_finished(),
            "the first prompt finished before a refusal was seen"
        );
    }
    let body = refused.expect("a second large prompt was never refused");
    assert_eq!(body["error"]["type"], "tokenizer_busy");
    assert_eq!(body["error"]["code"], 503);
    let health = http().get(r.url("/health")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let (status, body) = complete(&r, "a small prompt").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !first.is_finished(),
        "the large prompt was done too soon to show anything"
    );
    let (status, body) = first.await.unwrap();
    assert_eq!(status, 200, "{body}");
    // The refused request changed nothing: only the two routed ones
    // reached the worker, and nothing stays counted in flight.
    assert_eq!(worker.hits(), 2);
    for _ in 0..50 {
        if in_flight(&r).await == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("in-flight counts left behind");
}
