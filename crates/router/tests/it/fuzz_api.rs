//! Bounded fuzzing of every parser that takes outside input, as part of the
//! normal suite: proptest generates request bodies (JSON shaped like real
//! requests, arbitrary JSON, arbitrary and mutated bytes) and sends them
//! through a real in-process router, against a real valkey-server and fake
//! workers over HTTP; block hashes are fuzzed directly. (The KV-event
//! decoder and ZMQ frames are fuzzed in `crates/worker/tests/it/kv_events/props.rs`.)
//!
//! Every answer must be a success, a JSON 4xx, or a JSON 502/503/504 (a
//! worker or Valkey failing); never another 5xx, a dropped connection (a
//! panic) or a hang. After each run the router still answers `/health`,
//! and the shared state is consistent: forward and reverse maps agree for
//! every model, and `prefix-router inspect --check` passes.
//!
//! Cases per target: see `cases()` (a few hundred for the bodies sent
//! through the router, each run with new random inputs);
//! `PREFIX_ROUTER_FUZZ_CASES=<n>` runs `n` per target instead (for longer
//! runs by hand: docs/architecture.md, "The test command"). Each test prints how
//! many inputs it executed and the answers by status (`cargo test --test
//! fuzz_api -- --nocapture`); `PREFIX_ROUTER_FUZZ_DEBUG=1` also prints
//! every error answer, to see which inputs the generators waste.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use prefix_router::WORKER_HEADER;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use protocol::hashing::BlockHash;
use serde_json::{Map, Value, json};
use state::{StateTtls, WorkerHeartbeat};
use support::fake_worker::FakeWorker;
use support::{Router, TOKEN, Valkey, args, raw_state, store, tokenizer_dir};

const QWEN: &str = "qwen3";

/// Cases per target: `default`, or `PREFIX_ROUTER_FUZZ_CASES`.
fn cases(default: u32) -> u32 {
    std::env::var("PREFIX_ROUTER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

/// Runs `strategy` through `test`, counting executions (shrinking
/// included); panics with the minimal failing input. Runs on a thread with
/// a large stack: the nested strategies' value trees recurse deeply in
/// debug builds.
fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: impl FnOnce() -> S + Send,
    test: impl Fn(S::Value) -> Result<(), TestCaseError> + Sync,
) -> usize {
    let count = AtomicUsize::new(0);
    let result = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(format!("fuzz {name}"))
            .stack_size(256 << 20)
            .spawn_scoped(scope, || {
                let mut runner = TestRunner::new(config(cases));
                runner
                    .run(&strategy(), |input| {
                        count.fetch_add(1, Ordering::Relaxed);
                        test(input)
                    })
                    .map_err(|e| e.to_string())
            })
            .expect("spawn the fuzz thread")
            .join()
    });
    let n = count.load(Ordering::Relaxed);
    println!("fuzz executions: {name}: {n}");
    match result {
        Ok(Ok(())) => n,
        Ok(Err(e)) => panic!("{name}: {e}"),
        Err(_) => panic!("{name}: the test itself panicked"),
    }
}

// ---------------------------------------------------------------- inputs

/// Any JSON value, a few levels deep; object keys never `endless` (the
/// fake worker's switch for a never-ending stream).
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{1,10}", inner, 0..6).prop_map(|m| {
                Value::Object(m.into_iter().filter(|(k, _)| k != "endless").collect())
            }),
        ]
    })
}

/// Text a tokenizer may find hard: any characters, special tokens, long
/// runs, whitespace and control characters.
fn arb_text() -> impl Strategy<Value = String> {
    let tricky = prop_oneof![
        Just("<|im_start|>"),
        Just("<|im_end|>"),
        Just("<|endoftext|>"),
        Just("<think>"),
        Just("</think>"),
        Just("<tool_call>"),
        Just("\u{0}"),
        Just("\u{feff}"),
        Just("\u{202e}"),
        Just("e\u{301}\u{301}\u{301}"),
        Just("👩‍👩‍👧‍👦"),
        Just("\r\n\t "),
        Just("{{ raise_exception('x') }}"),
        Just("{% for %}"),
        Just("       "),
        Just("ab"),
    ];
    prop_oneof![
        4 => ".{0,120}",
        3 => "[a-zA-Z0-9 .,!?\n]{0,400}",
        3 => proptest::collection::vec((tricky, 1usize..40), 0..6).prop_map(|parts| {
            parts.into_iter().map(|(s, n)| s.repeat(n)).collect::<String>()
        }),
    ]
}

/// A token id as a client may send it: valid, out of the vocabulary, or
/// not a u32 at all.
fn arb_token() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => (0u32..160_000).prop_map(Value::from),
        1 => any::<u32>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => (-1e12f64..1e12).prop_map(Value::from),
        1 => arb_json(),
    ]
}

fn arb_model() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => Just(Value::from(QWEN)),
        2 => Just(Value::from("sql-lora")),
        1 => Just(Value::from("nobody-serves-this")),
        1 => "[a-zA-Z0-9._/:-]{0,30}".prop_map(Value::from),
        1 => ".{0,12}".prop_map(Value::from),
        1 => arb_json(),
    ]
}

fn arb_prompt() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => arb_text().prop_map(Value::from),
        2 => proptest::collection::vec(arb_text(), 0..4).prop_map(|v| json!(v)),
        3 => proptest::collection::vec(0u32..160_000, 0..300).prop_map(|v| json!(v)),
        2 => proptest::collection::vec(arb_token(), 0..20).prop_map(Value::Array),
        1 => proptest::collection::vec(proptest::collection::vec(0u32..1000, 0..50), 0..3)
            .prop_map(|v| json!(v)),
        1 => arb_json(),
    ]
}

/// Sets `key` to `value` when given.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.to_owned(), v);
    }
}

fn extra_fields() -> impl Strategy<Value = Vec<(String, Value)>> {
    proptest::collection::vec(("[a-z_]{1,12}", arb_json()), 0..3)
        .prop_map(|v| v.into_iter().filter(|(k, _)| k != "endless").collect())
}

fn arb_bool_ish() -> impl Strategy<Value = Value> {
    prop_oneof![8 => any::<bool>().prop_map(Value::Bool), 1 => arb_json()]
}

/// A `/v1/completions` body: mostly well formed, every field sometimes
/// missing or of any type.
fn completion_body() -> impl Strategy<Value = Value> {
    (
        proptest::option::weighted(0.95, arb_model()),
        proptest::option::weighted(0.95, arb_prompt()),
        proptest::option::of(arb_bool_ish()),
        proptest::option::of(prop_oneof![arb_text().prop_map(Value::from), arb_json()]),
        proptest::option::of(prop_oneof![(0u32..64).prop_map(Value::from), arb_json()]),
        extra_fields(),
    )
        .prop_map(|(model, prompt, stream, salt, max_tokens, extra)| {
            let mut m = Map::new();
            for (k, v) in extra {
                m.insert(k, v);
            }
            put(&mut m, "model", model);
            put(&mut m, "prompt", prompt);
            put(&mut m, "stream", stream);
            put(&mut m, "cache_salt", salt);
            put(&mut m, "max_tokens", max_tokens);
            Value::Object(m)
        })
}

fn arb_content() -> impl Strategy<Value = Value> {
    let part = prop_oneof![
        4 => arb_text().prop_map(|t| json!({"type": "text", "text": t})),
        1 => arb_text().prop_map(|t| json!({"type": "image_url", "image_url": {"url": t}})),
        1 => arb_text().prop_map(|t| json!({"type": "input_audio", "input_audio": {"data": t}})),
        1 => arb_text().prop_map(|t| json!({"type": "refusal", "refusal": t})),
        1 => arb_text().prop_map(|t| json!({"text": t})),
        1 => arb_json(),
    ];
    prop_oneof![
        10 => arb_text().prop_map(Value::from),
        4 => proptest::collection::vec(part, 0..4).prop_map(Value::Array),
        1 => Just(Value::Null),
        1 => arb_json(),
    ]
}

fn arb_tool_calls() -> impl Strategy<Value = Value> {
    let call = (
        "[a-z_]{0,10}",
        prop_oneof![arb_text().prop_map(Value::from), arb_json()],
    )
        .prop_map(|(name, arguments)| {
            json!({"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}})
        });
    prop_oneof![
        3 => proptest::collection::vec(call, 0..3).prop_map(Value::Array),
        1 => arb_json(),
    ]
}

fn arb_message() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            18 => prop_oneof![
                Just("system"),
                Just("user"),
                Just("assistant"),
                Just("tool"),
                Just("developer"),
            ]
            .prop_map(Value::from),
            1 => ".{0,10}".prop_map(Value::from),
            1 => arb_json(),
        ],
        proptest::option::weighted(0.9, arb_content()),
        proptest::option::weighted(0.1, arb_text().prop_map(Value::from)),
        proptest::option::weighted(0.15, arb_tool_calls()),
        proptest::option::weighted(0.1, arb_text().prop_map(Value::from)),
        proptest::option::weighted(
            0.1,
            prop_oneof![arb_text().prop_map(Value::from), arb_json()],
        ),
    )
        .prop_map(
            |(role, content, name, tool_calls, tool_call_id, reasoning)| {
                let mut m = Map::new();
                m.insert("role".into(), role);
                put(&mut m, "content", content);
                put(&mut m, "name", name);
                put(&mut m, "tool_calls", tool_calls);
                put(&mut m, "tool_call_id", tool_call_id);
                put(&mut m, "reasoning_content", reasoning);
                Value::Object(m)
            },
        )
}

fn arb_tools() -> impl Strategy<Value = Value> {
    let schema = prop_oneof![
        4 => proptest::collection::btree_map("[a-z_]{1,10}", prop_oneof![
            Just(json!({"type": "string"})),
            Just(json!({"type": "integer", "minimum": 0})),
            arb_text().prop_map(|d| json!({"type": "array", "items": {"type": "string"}, "description": d})),
        ], 0..4)
        .prop_map(|props| json!({"type": "object", "properties": props})),
        1 => arb_json(),
    ];
    let tool = ("[a-zA-Z_]{1,12}", arb_text(), schema).prop_map(|(name, desc, params)| {
        json!({"type": "function", "function": {"name": name, "description": desc, "parameters": params}})
    });
    prop_oneof![
        8 => proptest::collection::vec(tool, 1..3).prop_map(Value::Array),
        1 => arb_json(),
    ]
}

/// A `/v1/chat/completions` body.
fn chat_body() -> impl Strategy<Value = Value> {
    (
        proptest::option::weighted(0.95, arb_model()),
        prop_oneof![
            16 => proptest::collection::vec(arb_message(), 1..5).prop_map(Value::Array),
            1 => Just(json!([])),
            1 => arb_json(),
        ],
        proptest::option::weighted(0.2, arb_tools()),
        proptest::option::weighted(
            0.2,
            prop_oneof![
                8 => arb_bool_ish().prop_map(|b| json!({"enable_thinking": b})),
                1 => arb_json(),
            ],
        ),
        proptest::option::weighted(0.2, arb_bool_ish()),
        proptest::option::weighted(0.1, arb_bool_ish()),
        proptest::option::weighted(0.03, arb_text().prop_map(Value::from)),
        proptest::option::of(arb_bool_ish()),
        extra_fields(),
    )
        .prop_map(
            |(model, messages, tools, kwargs, add_gen, cont, template, stream, extra)| {
                let mut m = Map::new();
                for (k, v) in extra {
                    m.insert(k, v);
                }
                put(&mut m, "model", model);
                m.insert("messages".into(), messages);
                put(&mut m, "tools", tools);
                put(&mut m, "chat_template_kwargs", kwargs);
                put(&mut m, "add_generation_prompt", add_gen);
                put(&mut m, "continue_final_message", cont);
                put(&mut m, "chat_template", template);
                put(&mut m, "stream", stream);
                Value::Object(m)
            },
        )
}

/// `bytes` with some bytes overwritten, and perhaps truncated.
fn mutate(bytes: Vec<u8>, flips: Vec<(usize, u8)>, cut: Option<usize>) -> Vec<u8> {
    let mut out = bytes;
    if !out.is_empty() {
        for (at, b) in flips {
            let len = out.len();
            out[at % len] = b;
        }
    }
    if let Some(c) = cut {
        out.truncate(c % (out.len() + 1));
    }
    out
}

/// Arbitrary bytes, or a generated body corrupted at the byte level.
fn arb_bytes(body: impl Strategy<Value = Value>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        (
            body,
            proptest::collection::vec(
                (
                    any::<usize>(),
                    prop_oneof![3 => 0x20u8..0x7f, 1 => any::<u8>()]
                ),
                1..4,
            ),
            proptest::option::weighted(0.2, any::<usize>()),
        )
            .prop_map(|(v, flips, cut)| mutate(v.to_string().into_bytes(), flips, cut)),
    ]
}

// ---------------------------------------------------------------- checks

/// One request the fuzzer sends.
#[derive(Debug, Clone)]
struct Call {
    method: reqwest::Method,
    path: String,
    body: Bytes,
}

impl Call {
    fn post(path: &str, body: impl Into<Bytes>) -> Call {
        Call {
            method: reqwest::Method::POST,
            path: path.to_owned(),
            body: body.into(),
        }
    }
}

/// Sends `call` (with the token) and judges the answer; counts its status.
async fn check_call(
    client: &reqwest::Client,
    router: &Router,
    call: &Call,
    statuses: &Mutex<BTreeMap<u16, usize>>,
) -> Result<(), TestCaseError> {
    let what = format!(
        "{} {} {:?}",
        call.method,
        call.path,
        String::from_utf8_lossy(&call.body[..call.body.len().min(300)])
    );
    let send = client
        .request(call.method.clone(), router.url(&call.path))
        .bearer_auth(TOKEN)
        .body(call.body.clone())
        .send();
    let exchange = async {
        let resp = send.await?;
        let status = resp.status().as_u16();
        let relayed = resp.headers().contains_key(WORKER_HEADER);
        let body = resp.bytes().await?;
        Ok::<_, reqwest::Error>((status, relayed, body))
    };
    let (status, relayed, body) =
        match tokio::time::timeout(Duration::from_secs(30), exchange).await {
            Err(_) => return Err(TestCaseError::fail(format!("{what}: no answer in 30 s"))),
            Ok(Err(e)) => {
                return Err(TestCaseError::fail(format!(
                    "{what}: connection failed (a panic?): {e}"
                )));
            }
            Ok(Ok(answer)) => answer,
        };
    if let Ok(mut counts) = statuses.lock() {
        *counts.entry(status).or_default() += 1;
    }
    if std::env::var_os("PREFIX_ROUTER_FUZZ_DEBUG").is_some() && status >= 400 {
        println!(
            "DEBUG {} {status} {}",
            call.path,
            String::from_utf8_lossy(&body[..body.len().min(200)])
        );
    }
    judge(status, relayed, &body).map_err(|why| TestCaseError::fail(format!("{what}: {why}")))
}

/// The rules every answer obeys.
fn judge(status: u16, relayed: bool, body: &[u8]) -> Result<(), String> {
    if status >= 500 && !matches!(status, 502..=504) {
        return Err(format!(
            "status {status}: {}",
            String::from_utf8_lossy(body)
        ));
    }
    if status >= 400 && !relayed {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            format!(
                "{status} body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(body)
            )
        })?;
        let err = &v["error"];
        let ok = err["message"].as_str().is_some_and(|m| !m.is_empty())
            && err["type"].as_str().is_some_and(|t| !t.is_empty())
            && err["code"] == status;
        if !ok {
            return Err(format!("{status} body is not the error shape: {v}"));
        }
    }
    Ok(())
}

/// A runtime, a Valkey and a router (with the real tokenizer for [`QWEN`]
/// and a LoRA adapter), and `workers` fake workers registered for it.
struct Rig {
    rt: tokio::runtime::Runtime,
    valkey: Valkey,
    router: Router,
    workers: Vec<FakeWorker>,
    client: reqwest::Client,
    /// Answers by status, over the whole run.
    statuses: Mutex<BTreeMap<u16, usize>>,
}

impl Rig {
    fn start(workers: usize) -> Rig {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let valkey = Valkey::start();
        let (router, workers, client) = rt.block_on(async {
            let mut a = args();
            a.model = Some(QWEN.into());
            a.tokenizer_dir = Some(tokenizer_dir());
            a.loras = vec!["sql-lora=/adapters/sql-lora".into()];
            let router = Router::start(&valkey.url(), a).await;
            let client = reqwest::Client::new();
            for _ in 0..600 {
                if client.get(router.url("/health")).send().await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let ttls = StateTtls {
                worker_lease: Duration::from_secs(600),
                ..StateTtls::default()
            };
            let s = store(&valkey, "pr", "fuzz-setup", ttls);
            let mut fakes = Vec::new();
            for i in 0..workers {
                let w = FakeWorker::start(&format!("w{i}")).await;
                // The first streamed request waits for one release per chunk.
                for _ in 0..3 {
                    let _ = w.release.send(());
                }
                let hb = WorkerHeartbeat {
                    worker_id: w.name().into(),
                    url: w.url(),
                    load: None,
                };
                s.heartbeat(QWEN, &hb).await.expect("heartbeat");
                fakes.push(w);
            }
            (router, fakes, client)
        });
        Rig {
            rt,
            valkey,
            router,
            workers,
            client,
            statuses: Mutex::default(),
        }
    }

    /// Prints the answers by status since the last report, and forgets them.
    fn report(&self, name: &str) {
        if let Ok(mut counts) = self.statuses.lock() {
            println!("answers by status: {name}: {counts:?}");
            counts.clear();
        }
    }

    fn call(&self, call: &Call) -> Result<(), TestCaseError> {
        self.rt
            .block_on(check_call(&self.client, &self.router, call, &self.statuses))
    }

    /// The router survived, then stops it; the state of every model is
    /// consistent, by the raw maps and by `prefix-router inspect --check`.
    fn finish(self) {
        let Rig {
            rt,
            valkey,
            router,
            workers,
            client,
            statuses,
        } = self;
        drop(statuses);
        rt.block_on(async {
            assert!(router.is_running(), "the router's task ended");
            let health = client
                .get(router.url("/health"))
                .send()
                .await
                .expect("/health");
            assert_eq!(health.status().as_u16(), 200);
            router.stop().await;
        });
        let s = store(&valkey, "pr", "fuzz-check", StateTtls::default());
        let models = rt.block_on(s.models()).expect("models");
        for model in &models {
            // Background purges of drained workers may still be running.
            let mut agreed = false;
            for _ in 0..100 {
                let raw = raw_state(&valkey, "pr", model);
                if raw.forward_pairs() == raw.reverse_pairs()
                    && raw.speculative_forward_pairs() == raw.speculative_pairs()
                {
                    agreed = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(agreed, "forward and reverse maps of {model:?} disagree");
        }
        let out = support::router_command("inspect")
            .args(["--check", "--valkey", &valkey.url()])
            .output()
            .expect("run inspect");
        assert!(
            out.status.success(),
            "inspect --check failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        println!(
            "state checked: {} models consistent, inspect --check passed",
            models.len()
        );
        drop(workers);
        drop(rt);
    }
}

// ---------------------------------------------------------------- targets

#[test]
fn openai_bodies_through_a_real_router() {
    let rig = Rig::start(2);
    let mut total = 0;
    let completions = || {
        (completion_body(), 0u8..10).prop_map(|(body, pick)| {
            let path = match pick {
                0 => "/admin/explain",
                1 => "/v1/embeddings",
                _ => "/v1/completions",
            };
            Call::post(path, body.to_string())
        })
    };
    total += fuzz("completions JSON", cases(200), completions, |c| {
        rig.call(&c)
    });
    rig.report("completions JSON");
    let chats = || {
        (chat_body(), 0u8..10).prop_map(|(body, pick)| {
            let path = if pick == 0 {
                "/admin/explain"
            } else {
                "/v1/chat/completions"
            };
            Call::post(path, body.to_string())
        })
    };
    total += fuzz("chat JSON", cases(200), chats, |c| rig.call(&c));
    rig.report("chat JSON");
    let bytes = || {
        (
            prop_oneof![arb_bytes(completion_body()), arb_bytes(chat_body())],
            prop_oneof![
                Just("/v1/completions"),
                Just("/v1/chat/completions"),
                Just("/v1/embeddings"),
                Just("/admin/explain"),
            ],
        )
            .prop_map(|(body, path)| Call::post(path, body))
    };
    total += fuzz("OpenAI bytes", cases(200), bytes, |c| rig.call(&c));
    rig.report("OpenAI bytes");
    let served: usize = rig.workers.iter().map(FakeWorker::hits).sum();
    println!("fuzz executions: OpenAI total: {total} ({served} forwarded to workers)");
    assert!(served > 0, "no request was ever routed");
    rig.finish();
}

/// A block hash as a worker may send it: valid (small, to collide), any
/// u64, hex, or malformed in every way.
fn arb_hash() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (0u64..64).prop_map(Value::from),
        2 => any::<u64>().prop_map(Value::from),
        2 => (0u64..64).prop_map(|h| Value::from(BlockHash(h).to_hex())),
        1 => any::<u64>().prop_map(|h| Value::from(format!("{h:016X}"))),
        1 => "[0-9a-fA-FxXg+ -]{0,20}".prop_map(Value::from),
        1 => ".{0,20}".prop_map(Value::from),
        1 => (i64::MIN..0).prop_map(Value::from),
        1 => (-1e20f64..1e20).prop_map(Value::from),
        1 => arb_json(),
    ]
}

fn arb_hashes() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => proptest::collection::vec((0u64..64).prop_map(Value::from), 0..40).prop_map(Value::Array),
        4 => proptest::collection::vec(arb_hash(), 0..40).prop_map(Value::Array),
        1 => arb_json(),
    ]
}

fn arb_worker_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => prop_oneof![Just("f0"), Just("f1"), Just("f2")].prop_map(Value::from),
        1 => "[a-zA-Z0-9_.:-]{0,12}".prop_map(Value::from),
        1 => ".{0,10}".prop_map(Value::from),
        1 => arb_json(),
    ]
}

fn arb_push_model() -> impl Strategy<Value = Option<Value>> {
    proptest::option::weighted(
        0.7,
        prop_oneof![
            6 => Just(Value::from(QWEN)),
            2 => Just(Value::from("fz")),
            1 => "[a-zA-Z0-9._/-]{0,10}".prop_map(Value::from),
            1 => arb_json(),
        ],
    )
}

fn arb_load() -> impl Strategy<Value = Value> {
    let num = prop_oneof![
        4 => (0u64..100).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => (-10.0f64..10.0).prop_map(Value::from),
        1 => arb_json(),
    ];
    prop_oneof![
        4 => (
            proptest::option::of(num.clone()),
            proptest::option::of(num.clone()),
            proptest::option::of(prop_oneof![(0.0f64..1.0).prop_map(Value::from), num]),
        )
            .prop_map(|(w, r, kv)| {
                let mut m = Map::new();
                put(&mut m, "num_requests_waiting", w);
                put(&mut m, "num_requests_running", r);
                put(&mut m, "kv_cache_usage_perc", kv);
                Value::Object(m)
            }),
        1 => arb_json(),
    ]
}

/// One call of the push API with a body shaped like the route's.
fn push_call() -> impl Strategy<Value = Call> {
    let heartbeat = (
        arb_worker_id(),
        arb_push_model(),
        prop_oneof![
            4 => Just(Value::from("http://127.0.0.1:9")),
            1 => ".{0,30}".prop_map(Value::from),
            1 => "https?://[a-z0-9.:/]{0,20}".prop_map(Value::from),
            1 => arb_json(),
        ],
        proptest::option::of(arb_load()),
    )
        .prop_map(|(id, model, url, load)| {
            let mut m = Map::new();
            m.insert("worker_id".into(), id);
            put(&mut m, "model", model);
            m.insert("url".into(), url);
            put(&mut m, "load", load);
            ("/internal/heartbeat", m)
        });
    let batch = (
        arb_worker_id(),
        arb_push_model(),
        arb_hashes(),
        prop_oneof![
            Just(("/internal/stored", "block_hashes")),
            Just(("/internal/eviction", "evicted_hashes")),
        ],
    )
        .prop_map(|(id, model, hashes, (path, field))| {
            let mut m = Map::new();
            m.insert("worker_id".into(), id);
            put(&mut m, "model", model);
            m.insert(field.into(), hashes);
            (path, m)
        });
    let sync = (
        arb_worker_id(),
        arb_push_model(),
        arb_hashes(),
        proptest::option::weighted(
            0.5,
            prop_oneof![
                4 => prop_oneof![Just("s1"), Just("s2")].prop_map(Value::from),
                1 => ".{0,12}".prop_map(Value::from),
                1 => arb_json(),
            ],
        ),
        proptest::option::weighted(0.5, arb_bool_ish()),
    )
        .prop_map(|(id, model, hashes, sync_id, last)| {
            let mut m = Map::new();
            m.insert("worker_id".into(), id);
            put(&mut m, "model", model);
            m.insert("active_hashes".into(), hashes);
            put(&mut m, "sync_id", sync_id);
            put(&mut m, "last", last);
            ("/internal/sync", m)
        });
    (
        prop_oneof![3 => heartbeat, 4 => batch, 3 => sync],
        extra_fields(),
        0u8..20,
    )
        .prop_map(|((path, mut m), extra, drop_field)| {
            for (k, v) in extra {
                m.entry(k).or_insert(v);
            }
            // Now and then a required field goes missing.
            if drop_field == 0
                && let Some(k) = m.keys().next().cloned()
            {
                m.remove(&k);
            }
            Call::post(path, Value::Object(m).to_string())
        })
}

/// Percent-encodes every byte but unreserved ones.
fn encode_path(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn push_api_bodies_through_a_real_router() {
    let rig = Rig::start(0);
    let mut total = 0;
    total += fuzz("push API JSON", cases(300), push_call, |c| rig.call(&c));
    rig.report("push API JSON");
    let bytes = || {
        (
            arb_bytes(
                push_call().prop_map(|c| serde_json::from_slice(&c.body).unwrap_or(Value::Null)),
            ),
            prop_oneof![
                Just("/internal/heartbeat"),
                Just("/internal/stored"),
                Just("/internal/eviction"),
                Just("/internal/sync"),
            ],
        )
            .prop_map(|(body, path)| Call::post(path, body))
    };
    total += fuzz("push API bytes", cases(150), bytes, |c| rig.call(&c));
    rig.report("push API bytes");
    // Drains and listings with any id, model and query.
    let queries = || {
        (
            prop_oneof![
                4 => prop_oneof![Just("f0"), Just("f1"), Just("f2")].prop_map(str::to_owned),
                1 => ".{0,12}",
            ],
            proptest::option::of(prop_oneof![
                Just(QWEN.to_owned()),
                Just("fz".to_owned()),
                ".{0,10}"
            ]),
            any::<bool>(),
            proptest::option::of("[&=%a-z0-9]{0,12}"),
        )
            .prop_map(|(id, model, drain, raw)| {
                let mut query = model
                    .map(|m| format!("?model={}", encode_path(&m)))
                    .unwrap_or_default();
                if let Some(r) = raw {
                    query.push_str(if query.is_empty() { "?" } else { "&" });
                    query.push_str(&r);
                }
                if drain {
                    Call {
                        method: reqwest::Method::DELETE,
                        path: format!("/internal/workers/{}{query}", encode_path(&id)),
                        body: Bytes::new(),
                    }
                } else {
                    Call {
                        method: reqwest::Method::GET,
                        path: format!("/admin/workers{query}"),
                        body: Bytes::new(),
                    }
                }
            })
    };
    total += fuzz("drain and list", cases(100), queries, |c| rig.call(&c));
    rig.report("drain and list");
    println!("fuzz executions: push API total: {total}");
    rig.finish();
}

#[test]
fn block_hashes_parse_exactly_as_specified() {
    let mut total = 0;
    let text = || {
        prop_oneof![
            "[0-9a-fA-F]{16}",
            "[0-9a-fA-F]{0,20}",
            "[0-9a-fA-FxXg+ -]{0,20}",
            ".{0,40}",
        ]
    };
    total += fuzz("block hash text", cases(2000), text, |s| {
        let parsed = s.parse::<BlockHash>();
        let valid = s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
        prop_assert_eq!(parsed.is_ok(), valid, "{:?}", s);
        match parsed {
            Ok(h) => {
                prop_assert_eq!(h.0, u64::from_str_radix(&s, 16).unwrap());
                prop_assert_eq!(h.to_hex(), s.to_ascii_lowercase());
                prop_assert_eq!(h.to_hex().parse::<BlockHash>().unwrap(), h);
            }
            Err(e) => prop_assert!(e.0.chars().count() <= 40, "error quotes {:?}", e.0),
        }
        Ok(())
    });
    total += fuzz("block hash u64", cases(500), any::<u64>, |n| {
        let h = BlockHash(n);
        prop_assert_eq!(h.to_hex().len(), 16);
        prop_assert_eq!(h.to_hex().parse::<BlockHash>().unwrap(), h);
        let from_json: BlockHash = serde_json::from_value(json!(n)).unwrap();
        prop_assert_eq!(from_json, h);
        let from_hex: BlockHash = serde_json::from_value(json!(h.to_hex())).unwrap();
        prop_assert_eq!(from_hex, h);
        prop_assert_eq!(serde_json::to_value(h).unwrap(), json!(h.to_hex()));
        Ok(())
    });
    total += fuzz(
        "block hash JSON",
        cases(1000),
        || prop_oneof![arb_hash(), arb_json()],
        |v| {
            let parsed = serde_json::from_value::<BlockHash>(v.clone());
            let valid = match &v {
                Value::Number(n) => n.as_u64().is_some(),
                Value::String(s) => s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()),
                _ => false,
            };
            prop_assert_eq!(parsed.is_ok(), valid, "{}", v);
            Ok(())
        },
    );
    // Raw JSON text of hash lists, including numbers no JSON value holds.
    let raw = || {
        prop_oneof![
            proptest::collection::vec(
                prop_oneof![
                    any::<u64>().prop_map(|n| n.to_string()),
                    "-?[0-9]{1,25}(\\.[0-9]{0,3})?(e[+-]?[0-9]{1,3})?",
                    "\"[0-9a-fA-Fx]{0,18}\"",
                    Just("null".to_owned()),
                ],
                0..10,
            )
            .prop_map(|items| format!("[{}]", items.join(","))),
            ".{0,40}",
        ]
    };
    total += fuzz("block hash list text", cases(1000), raw, |text| {
        let _ = serde_json::from_str::<Vec<BlockHash>>(&text);
        Ok(())
    });
    println!("fuzz executions: block hash total: {total}");
}
