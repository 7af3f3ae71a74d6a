//! The response cache end to end: a real router with `--response-cache-ttl`,
//! a real valkey-server, a fake OpenAI worker over HTTP, the real Qwen3
//! tokenizer. Each test has its own Valkey, so its keys are its own.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::Duration;

use axum::http::StatusCode;
use futures_util::StreamExt;
use prefix_router::{CACHE_HEADER, ResponseCacheArgs};
use serde_json::{Value, json};
use support::fake_worker::{FakeWorker, SSE_CHUNKS};
use support::{Router, Valkey, args, http, tokenizer_dir};

const MODEL: &str = "qwen3";

struct Fleet {
    valkey: Valkey,
    router: Router,
    worker: FakeWorker,
}

/// A router caching for `ttl` (entries of at most `max_entry` bytes,
/// `max_bytes` per model) in front of one fake worker.
async fn fleet(ttl: Duration, max_entry: Option<usize>, max_bytes: Option<u64>) -> Fleet {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.response_cache = Box::new(ResponseCacheArgs {
        response_cache_ttl: Some(ttl),
        response_cache_max_entry_bytes: max_entry,
        response_cache_max_bytes: max_bytes,
    });
    let router = Router::start(&valkey.url(), a).await;
    let worker = FakeWorker::start("w0").await;
    worker.register_in(&valkey, MODEL).await;
    Fleet {
        valkey,
        router,
        worker,
    }
}

/// A response as the client saw it: status, cache header, body bytes.
struct Answer {
    status: u16,
    cache: Option<String>,
    content_type: String,
    body: Vec<u8>,
}

/// POSTs `body` (raw bytes) to `path` with `token` as the bearer credential.
async fn post_raw(f: &Fleet, path: &str, body: &str, token: Option<&str>) -> Answer {
    let mut req = http()
        .post(f.router.url(path))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let header = |n: &str| {
        resp.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (cache, content_type) = (header(CACHE_HEADER), header("content-type"));
    Answer {
        status: resp.status().as_u16(),
        cache,
        content_type: content_type.unwrap_or_default(),
        body: resp.bytes().await.unwrap().to_vec(),
    }
}

async fn post(f: &Fleet, body: &Value) -> Answer {
    post_raw(f, "/v1/completions", &body.to_string(), None).await
}

/// The response cache's entries in Valkey (`rc:<key>`).
fn entries(valkey: &Valkey) -> Vec<String> {
    let mut conn = valkey.conn();
    redis::cmd("KEYS")
        .arg(format!("pr:{{{MODEL}}}:rc:*"))
        .query(&mut conn)
        .unwrap()
}

/// Waits until Valkey holds `n` entries (stores run after the response).
async fn wait_entries(valkey: &Valkey, n: usize) {
    for _ in 0..200 {
        if entries(valkey).len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} entries stored, expected {n}", entries(valkey).len());
}

/// The chunks of a stored entry, read by its documented layout
/// (docs/state.md): `PRC1`, status, content type, chunk count, chunks.
fn stored_chunks(valkey: &Valkey, key: &str) -> (u16, String, Vec<Vec<u8>>) {
    let raw: Vec<u8> = redis::cmd("GET")
        .arg(key)
        .query(&mut valkey.conn())
        .unwrap();
    assert_eq!(&raw[..4], b"PRC1");
    let be16 = |at: usize| usize::from(u16::from_be_bytes([raw[at], raw[at + 1]]));
    let be32 = |at: usize| u32::from_be_bytes(raw[at..at + 4].try_into().unwrap()) as usize;
    let status = be16(4) as u16;
    let ct_len = be16(6);
    let content_type = String::from_utf8(raw[8..8 + ct_len].to_vec()).unwrap();
    let mut at = 8 + ct_len;
    let count = be32(at);
    at += 4;
    let mut chunks = Vec::new();
    for _ in 0..count {
        let len = be32(at);
        chunks.push(raw[at + 4..at + 4 + len].to_vec());
        at += 4 + len;
    }
    assert_eq!(at, raw.len());
    (status, content_type, chunks)
}

#[tokio::test]
async fn an_identical_request_is_replayed_byte_for_byte_without_the_worker() {
    let f = fleet(Duration::from_secs(60), None, None).await;
    let body = r#"{"model":"qwen3","prompt":"Say hello.","temperature":0,"max_tokens":8}"#;
    let first = post_raw(&f, "/v1/completions", body, None).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.cache.as_deref(), Some("miss"));
    wait_entries(&f.valkey, 1).await;
    // The same request, its keys reordered and spaced: the same entry.
    let reordered =
        r#"{ "max_tokens": 8, "temperature": 0.0,  "prompt": "Say hello.", "model": "qwen3" }"#;
    let second = post_raw(&f, "/v1/completions", reordered, None).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.cache.as_deref(), Some("hit"));
    assert_eq!(second.body, first.body, "replayed byte for byte");
    assert_eq!(second.content_type, first.content_type);
    assert_eq!(f.worker.hits(), 1, "a hit never reaches a worker");
    // Chat completions are cached the same way.
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                      "temperature": 0})
    .to_string();
    let first_chat = post_raw(&f, "/v1/chat/completions", &chat, None).await;
    assert_eq!(first_chat.cache.as_deref(), Some("miss"));
    wait_entries(&f.valkey, 2).await;
    let again = post_raw(&f, "/v1/chat/completions", &chat, None).await;
    assert_eq!(again.cache.as_deref(), Some("hit"));
    assert_eq!(again.body, first_chat.body);
    assert_eq!(f.worker.hits(), 2);
    let metrics = support::metrics_text(&f.router).await;
    assert!(
        metrics.contains(r#"prefix_router_response_cache_total{outcome="hit"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_streamed_answer_is_replayed_chunk_for_chunk() {
    let f = fleet(Duration::from_secs(60), None, None).await;
    let body = json!({"model": MODEL, "prompt": "Count.", "temperature": 0, "stream": true});
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()[CACHE_HEADER], "miss");
    // One chunk released at a time, so that each reaches the router alone.
    let mut stream = resp.bytes_stream();
    let mut first = Vec::new();
    for chunk in SSE_CHUNKS {
        f.worker.release.send(()).unwrap();
        let mut got = Vec::new();
        while got.len() < chunk.len() {
            got.extend_from_slice(&stream.next().await.unwrap().unwrap());
        }
        assert_eq!(got, chunk.as_bytes());
        first.extend_from_slice(&got);
    }
    assert!(stream.next().await.is_none());
    wait_entries(&f.valkey, 1).await;
    let key = entries(&f.valkey).remove(0);
    let (status, content_type, chunks) = stored_chunks(&f.valkey, &key);
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    let want: Vec<Vec<u8>> = SSE_CHUNKS.iter().map(|c| c.as_bytes().to_vec()).collect();
    assert_eq!(chunks, want, "stored as the chunks the worker sent");
    let again = post(&f, &body).await;
    assert_eq!(again.cache.as_deref(), Some("hit"));
    assert_eq!(again.content_type, "text/event-stream");
    assert_eq!(again.body, first, "the SSE stream replayed byte for byte");
    assert_eq!(f.worker.hits(), 1);
    // The same request not streamed is another entry.
    let plain = post(
        &f,
        &json!({"model": MODEL, "prompt": "Count.", "temperature": 0}),
    )
    .await;
    assert_eq!(plain.cache.as_deref(), Some("miss"));
}

#[tokio::test]
async fn cache_salts_and_tenants_never_share_entries() {
    let f = fleet(Duration::from_secs(60), None, None).await;
    let salted = |salt: &str| {
        json!({"model": MODEL, "prompt": "Secret?", "seed": 7, "cache_salt": salt}).to_string()
    };
    let send = |salt: &'static str, token: Option<&'static str>| {
        let body = salted(salt);
        let f = &f;
        async move { post_raw(f, "/v1/completions", &body, token).await }
    };
    assert_eq!(
        send("a", Some("key-1")).await.cache.as_deref(),
        Some("miss")
    );
    wait_entries(&f.valkey, 1).await;
    assert_eq!(send("a", Some("key-1")).await.cache.as_deref(), Some("hit"));
    assert_eq!(f.worker.hits(), 1);
    for (salt, token, n) in [
        ("b", Some("key-1"), 2),
        ("a", Some("key-2"), 3),
        ("a", None, 4),
    ] {
        let a = send(salt, token).await;
        assert_eq!(a.cache.as_deref(), Some("miss"), "{salt} {token:?}");
        assert_eq!(f.worker.hits(), n, "{salt} {token:?}");
    }
    // No entry holds the credential.
    wait_entries(&f.valkey, 4).await;
    let mut conn = f.valkey.conn();
    for key in entries(&f.valkey) {
        let raw: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
        assert!(!String::from_utf8_lossy(&raw).contains("key-1"));
        assert!(!key.contains("key-1"));
    }
}

#[tokio::test]
async fn only_deterministic_successful_answers_are_cached() {
    let f = fleet(Duration::from_secs(60), None, None).await;
    // Sampled: never cached, no header.
    let sampled = json!({"model": MODEL, "prompt": "Poem.", "temperature": 0.8});
    for n in 1..=2 {
        let a = post(&f, &sampled).await;
        assert_eq!((a.status, a.cache), (200, None));
        assert_eq!(f.worker.hits(), n);
    }
    // Several choices: not cached either.
    let several = json!({"model": MODEL, "prompt": "Poem.", "temperature": 0, "n": 2});
    assert_eq!(post(&f, &several).await.cache, None);
    // A seed makes sampling repeatable: cached.
    let seeded = json!({"model": MODEL, "prompt": "Poem.", "temperature": 0.8, "seed": 1});
    assert_eq!(post(&f, &seeded).await.cache.as_deref(), Some("miss"));
    wait_entries(&f.valkey, 1).await;
    assert_eq!(post(&f, &seeded).await.cache.as_deref(), Some("hit"));
    assert_eq!(f.worker.hits(), 4);
    // A worker's error is never stored.
    *f.worker.shared.status.lock().unwrap() = Some(StatusCode::INTERNAL_SERVER_ERROR);
    let failing = json!({"model": MODEL, "prompt": "Fail.", "temperature": 0});
    for n in 5..=6 {
        let a = post(&f, &failing).await;
        assert_eq!((a.status, a.cache.as_deref()), (500, Some("miss")));
        assert_eq!(f.worker.hits(), n);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(entries(&f.valkey).len(), 1);
}

#[tokio::test]
async fn entries_over_the_caps_are_not_stored() {
    // 200 bytes per model (so entries of at most 200 bytes): one small
    // answer (about 130 bytes) fits, a second does not, a large one never.
    let f = fleet(Duration::from_secs(60), Some(600), Some(200)).await;
    let large = json!({"model": MODEL, "prompt": "x".repeat(700), "temperature": 0});
    for n in 1..=2 {
        assert_eq!(post(&f, &large).await.cache.as_deref(), Some("miss"));
        assert_eq!(f.worker.hits(), n, "an answer over the entry cap");
    }
    let small = |p: &str| json!({"model": MODEL, "prompt": p, "temperature": 0});
    post(&f, &small("one")).await;
    wait_entries(&f.valkey, 1).await;
    assert_eq!(post(&f, &small("one")).await.cache.as_deref(), Some("hit"));
    post(&f, &small("two")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(entries(&f.valkey).len(), 1, "over the model's budget");
    assert_eq!(post(&f, &small("two")).await.cache.as_deref(), Some("miss"));
    let used: u64 = redis::cmd("GET")
        .arg(format!("pr:{{{MODEL}}}:rc_used"))
        .query(&mut f.valkey.conn())
        .unwrap();
    assert!(used > 0 && used <= 200, "{used}");
}

#[tokio::test]
async fn entries_expire_with_their_ttl() {
    let f = fleet(Duration::from_millis(1500), None, None).await;
    let body = json!({"model": MODEL, "prompt": "Brief.", "temperature": 0});
    post(&f, &body).await;
    wait_entries(&f.valkey, 1).await;
    let mut conn = f.valkey.conn();
    for key in ["rc_expiry", "rc_sizes", "rc_used"] {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(format!("pr:{{{MODEL}}}:{key}"))
            .query(&mut conn)
            .unwrap();
        assert!(pttl > 0 && pttl <= 1500, "{key} {pttl}");
    }
    assert_eq!(post(&f, &body).await.cache.as_deref(), Some("hit"));
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert!(entries(&f.valkey).is_empty(), "expired in Valkey");
    assert_eq!(post(&f, &body).await.cache.as_deref(), Some("miss"));
    assert_eq!(f.worker.hits(), 2);
}

#[tokio::test]
async fn without_valkey_requests_are_still_served() {
    let mut f = fleet(Duration::from_secs(60), None, None).await;
    let body = json!({"model": MODEL, "prompt": "Still there?", "temperature": 0});
    assert_eq!(post(&f, &body).await.cache.as_deref(), Some("miss"));
    wait_entries(&f.valkey, 1).await;
    f.valkey.kill();
    for n in 2..=3 {
        let a = post(&f, &body).await;
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
        assert_eq!(a.cache, None, "the cache is bypassed");
        assert_eq!(f.worker.hits(), n, "routed by the fallback");
    }
}

/// `prefix-router inspect --check --json` on namespace `pr`: (exit code, report).
fn inspect_check(valkey: &Valkey) -> (i32, Value) {
    let o = support::router_command("inspect")
        .args(["--check", "--json", "--recheck-delay", "0"])
        .env("PREFIX_ROUTER_VALKEY", &valkey.url())
        .env("PREFIX_ROUTER_KEY_PREFIX", "pr")
        .output()
        .unwrap();
    let report = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o.status.code().unwrap_or(-1), report)
}

#[tokio::test]
async fn inspect_knows_the_cache_keys_and_wants_them_to_expire() {
    let f = fleet(Duration::from_secs(60), None, None).await;
    post(
        &f,
        &json!({"model": MODEL, "prompt": "Keys?", "temperature": 0}),
    )
    .await;
    wait_entries(&f.valkey, 1).await;
    let (code, report) = inspect_check(&f.valkey);
    assert_eq!((code, &report["clean"]), (0, &json!(true)), "{report:#}");
    let key = entries(&f.valkey).remove(0);
    let _: () = redis::cmd("PERSIST")
        .arg(&key)
        .query(&mut f.valkey.conn())
        .unwrap();
    let (code, report) = inspect_check(&f.valkey);
    assert_eq!(code, 1, "{report:#}");
    assert!(
        report.to_string().contains("response-cache-without-ttl"),
        "{report:#}"
    );
}
