//! Mid-stream migration (issue 29) end to end: `sim-worker` processes
//! (deterministic, greedy-like answers) behind a real router on a real
//! valkey-server. A worker that cuts an answer, sends an error event in it
//! or stalls hands it over to another worker: the client's stream goes on
//! with the same id, no token lost or repeated, equal to the answer given
//! without the fault. Past the migration limit, or for a request that
//! cannot be continued exactly, the client gets an error event and no
//! `[DONE]`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use prefix_router::{MigrationArgs, ServeArgs, ServeConfig};
use serde_json::{Value, json};
use support::{Router, TOKEN, Valkey, args, get, http, tokenizer_dir};

pub(super) const MODEL: &str = "qwen3";

pub(super) async fn start_sim(r: &Router, id: &str) -> fleet::Sim {
    let program = fleet::binaries::workspace_binary("sim-worker").unwrap();
    fleet::SimSpec::new(id, program, MODEL, tokenizer_dir(), "/dev/null".into())
        .worker_id(id)
        .pushing(&r.url(""), TOKEN)
        .args(["--time-scale", "0.1"])
        .parallel_prefill()
        .start(Duration::from_secs(60))
        .await
        .expect("sim-worker did not start")
}

pub(super) async fn router(valkey: &Valkey, migration: MigrationArgs) -> Router {
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(60));
    a.migration = migration;
    Router::start(&valkey.url(), a).await
}

pub(super) async fn wait_live(r: &Router, ids: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, v) = get(r, &format!("/admin/workers?model={MODEL}")).await;
        let rows = v["workers"].as_array().cloned().unwrap_or_default();
        let live = |id: &str| {
            rows.iter()
                .any(|w| w["worker_id"] == id && w["status"] == "live")
        };
        if ids.iter().all(|id| live(id)) {
            return;
        }
        assert!(Instant::now() < deadline, "not live: {ids:?} in {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A router and sims `a` and `b`; `a` alone has answered `bodies` first
/// (their fault-free answers, returned), so that they go to `a` again (it
/// holds their prompts).
async fn fleet(
    migration: MigrationArgs,
    bodies: &[(&str, Value)],
) -> (Valkey, Router, [fleet::Sim; 2], Vec<Streamed>) {
    let valkey = Valkey::start();
    let r = router(&valkey, migration).await;
    let a = start_sim(&r, "a").await;
    wait_live(&r, &["a"]).await;
    let mut twins = Vec::new();
    for (path, body) in bodies {
        let s = stream(&r, path, body).await;
        assert_eq!(s.worker.as_deref(), Some("a"));
        s.assert_complete();
        twins.push(s);
    }
    let b = start_sim(&r, "b").await;
    wait_live(&r, &["a", "b"]).await;
    (valkey, r, [a, b], twins)
}

/// A streamed answer as the client saw it.
#[derive(Debug)]
struct Streamed {
    worker: Option<String>,
    events: Vec<Value>,
    /// The body ended in an error (a cut).
    cut: bool,
}

impl Streamed {
    fn chunks(&self) -> impl Iterator<Item = &Value> {
        self.events.iter().filter(|e| e.get("choices").is_some())
    }

    /// The text of choice 0, chat or completion.
    fn text(&self) -> String {
        self.chunks()
            .filter_map(|e| {
                e.pointer("/choices/0/text")
                    .or_else(|| e.pointer("/choices/0/delta/content"))
                    .and_then(Value::as_str)
            })
            .collect()
    }

    /// Every `token_ids` of choice 0.
    fn ids(&self) -> Vec<u64> {
        self.chunks()
            .filter_map(|e| e.pointer("/choices/0/token_ids").and_then(Value::as_array))
            .flatten()
            .map(|v| v.as_u64().unwrap())
            .collect()
    }

    /// The answer is whole: a finish reason, then `[DONE]`, no cut, one
    /// envelope on every chunk.
    fn assert_complete(&self) {
        assert!(!self.cut, "cut: {self:?}");
        assert_eq!(self.events.last(), Some(&json!("[DONE]")), "{self:?}");
        let finished = self
            .chunks()
            .filter(|e| {
                !e.pointer("/choices/0/finish_reason")
                    .unwrap_or(&Value::Null)
                    .is_null()
            })
            .count();
        assert_eq!(finished, 1, "{self:?}");
        let first = self.chunks().next().expect("a chunk");
        for c in self.chunks() {
            for k in ["id", "created", "model", "object"] {
                assert_eq!(c[k], first[k], "{k} differs: {self:?}");
            }
        }
    }
}

async fn stream(r: &Router, path: &str, body: &Value) -> Streamed {
    let resp = http().post(r.url(path)).json(body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let worker = resp
        .headers()
        .get("x-prefix-router-worker")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut bytes = resp.bytes_stream();
    let (mut buf, mut cut) = (Vec::new(), false);
    while let Some(part) = bytes.next().await {
        match part {
            Ok(b) => buf.extend_from_slice(&b),
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    let text = String::from_utf8(buf).unwrap();
    let events = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.into())))
        .collect();
    Streamed {
        worker,
        events,
        cut,
    }
}

/// The answers `r` moved (the recorder is the test process's: other tests
/// add theirs), and its metrics.
pub(super) async fn migrated(r: &Router) -> (u64, String) {
    let m = support::metrics_text(r).await;
    let n = m
        .lines()
        .find_map(|l| l.strip_prefix("prefix_router_migrations_total{outcome=\"migrated\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (n, m)
}

pub(super) async fn set_fault(sim: &fleet::Sim, fault: Value) {
    let r = http()
        .post(format!("{}/sim/faults", sim.url))
        .json(&json!({ "stream_fault": fault }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

pub(super) fn doc(topic: &str) -> String {
    (0..40)
        .map(|i| format!("Line {i} of the {topic} document, repeated for length.\n"))
        .collect()
}

fn completion(topic: &str, ids: bool) -> Value {
    json!({"model": MODEL, "prompt": doc(topic), "max_tokens": 16, "stream": true,
           "return_token_ids": ids, "stream_options": {"include_usage": true}})
}

fn chat(topic: &str, ids: bool) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": doc(topic)}],
           "max_completion_tokens": 16, "stream": true, "return_token_ids": ids,
           "stream_options": {"include_usage": true}})
}

fn usage(s: &Streamed) -> Value {
    s.events
        .iter()
        .find_map(|e| e.get("usage").filter(|u| !u.is_null()).cloned())
        .expect("a usage chunk")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broken_answer_moves_and_equals_its_fault_free_twin() {
    for kind in ["cut", "error"] {
        let bodies = [
            (
                "/v1/completions",
                completion(&format!("{kind} plain"), false),
            ),
            ("/v1/completions", completion(&format!("{kind} ids"), true)),
            ("/v1/chat/completions", chat(&format!("{kind} chat"), false)),
            (
                "/v1/chat/completions",
                chat(&format!("{kind} chat ids"), true),
            ),
        ];
        let (_valkey, r, [a, _b], twins) = fleet(MigrationArgs::default(), &bodies).await;
        set_fault(&a, json!({"after_tokens": 5, "kind": kind})).await;
        for ((path, body), twin) in bodies.iter().zip(&twins) {
            let moved = stream(&r, path, body).await;
            assert_eq!(
                moved.worker, twin.worker,
                "{path} went elsewhere: {moved:?}"
            );
            moved.assert_complete();
            assert_eq!(moved.text(), twin.text(), "{kind} {path}: {moved:?}");
            assert_eq!(moved.ids(), twin.ids(), "{kind} {path}");
            let asked = body["return_token_ids"] == true;
            assert_eq!(moved.ids().len(), if asked { 16 } else { 0 });
            let (u, t) = (usage(&moved), usage(twin));
            assert_eq!(u["completion_tokens"], 16, "{u}");
            assert_eq!(u["prompt_tokens"], t["prompt_tokens"], "{u} vs {t}");
            assert_eq!(u["total_tokens"], t["total_tokens"]);
            if path.contains("chat") {
                let first = moved.chunks().next().unwrap();
                assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
                assert!(
                    moved
                        .chunks()
                        .all(|c| c["object"] == "chat.completion.chunk")
                );
            }
            assert!(
                moved.events.iter().all(|e| e.get("error").is_none()),
                "{moved:?}"
            );
        }
        // Counted (the recorder is the test process's: other tests add theirs).
        let (migrated, m) = migrated(&r).await;
        assert!(
            migrated >= 4,
            "{}",
            m.lines()
                .filter(|l| l.contains("migrat"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_migration_or_when_inexact_the_client_gets_an_error_event() {
    let stop = {
        let mut b = completion("stop strings", false);
        b["stop"] = json!(["never appears"]);
        b
    };
    let plain = completion("limit zero", false);
    for (limit, body) in [(Some(0), &plain), (None, &stop)] {
        let migration = MigrationArgs {
            migration_limit: limit,
            ..MigrationArgs::default()
        };
        let (_valkey, r, [a, _b], _) = fleet(migration, &[("/v1/completions", body.clone())]).await;
        set_fault(&a, json!({"after_tokens": 5, "kind": "cut"})).await;
        let s = stream(&r, "/v1/completions", body).await;
        assert_eq!(s.worker.as_deref(), Some("a"));
        assert_eq!(s.chunks().count(), 5, "{s:?}");
        assert!(!s.events.contains(&json!("[DONE]")), "{s:?}");
        let err = s
            .events
            .iter()
            .find_map(|e| e.get("error"))
            .expect("an error event");
        let msg = err["message"].as_str().unwrap();
        let why = if limit == Some(0) {
            "migration is off"
        } else {
            "stop strings"
        };
        assert!(msg.contains(why), "{msg}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_worker_is_left_after_the_stall_timeout() {
    let migration = MigrationArgs {
        stall_timeout: Some(Duration::from_millis(700)),
        ..MigrationArgs::default()
    };
    let body = json!({"model": MODEL, "prompt": doc("stall"), "max_tokens": 40, "stream": true});
    let (_valkey, r, [a, _b], twins) = fleet(migration, &[("/v1/completions", body.clone())]).await;
    let twin = &twins[0];
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut bytes = resp.bytes_stream();
    let first = bytes.next().await.unwrap().unwrap();
    let pause = |on: bool| {
        let url = format!("{}/sim/faults", a.url);
        async move {
            http()
                .post(url)
                .json(&json!({"paused": on}))
                .send()
                .await
                .unwrap();
        }
    };
    pause(true).await;
    let mut text = String::from_utf8(first.to_vec()).unwrap();
    while let Some(part) = bytes.next().await {
        text.push_str(std::str::from_utf8(&part.expect("no cut")).unwrap());
    }
    pause(false).await;
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.into())))
        .collect();
    let moved = Streamed {
        worker: Some("a".into()),
        events,
        cut: false,
    };
    moved.assert_complete();
    assert_eq!(moved.text(), twin.text());
}

#[test]
fn bad_migration_settings_are_refused_at_start() {
    let with = |migration: MigrationArgs| {
        let mut a: ServeArgs = args();
        a.internal_token = Some(TOKEN.into());
        a.migration = migration;
        ServeConfig::resolve(a)
    };
    let limit = |n| MigrationArgs {
        migration_limit: Some(n),
        ..MigrationArgs::default()
    };
    let err = with(limit(101)).unwrap_err().to_string();
    assert!(err.contains("--migration-limit"), "{err}");
    let zero = MigrationArgs {
        stall_timeout: Some(Duration::ZERO),
        ..MigrationArgs::default()
    };
    let err = with(zero).unwrap_err().to_string();
    assert!(err.contains("--stall-timeout"), "{err}");
    assert!(with(limit(0)).is_ok());
}
