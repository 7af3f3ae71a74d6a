//! Graceful drain end to end: `sim-worker` processes behind real routers
//! on a real valkey-server. A worker drained by an operator
//! (`POST /admin/workers/{id}/drain` on any router) or stopped with SIGTERM
//! gets no new request from any router at once, its running answers
//! finish (or move to another worker at the drain deadline, token for
//! token), and once undrained or restarted it is routed to again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use prefix_router::MigrationArgs;
use serde_json::{Value, json};
use support::{Router, TOKEN, Valkey, args, get, http, tokenizer_dir};

const MODEL: &str = "qwen3";

fn sim_spec(r: &Router, id: &str) -> fleet::SimSpec {
    let program = fleet::binaries::workspace_binary("sim-worker").unwrap();
    fleet::SimSpec::new(id, program, MODEL, tokenizer_dir(), "/dev/null".into())
        .worker_id(id)
        .pushing(&r.url(""), TOKEN)
        // 20 ms a token: an answer of 100 tokens runs for about 2 s.
        .args(["--time-scale", "1", "--drain-deadline", "20s"])
        .parallel_prefill()
}

async fn start_sim(r: &Router, id: &str) -> fleet::Sim {
    sim_spec(r, id)
        .start(Duration::from_secs(60))
        .await
        .expect("sim-worker did not start")
}

async fn router(valkey: &Valkey) -> Router {
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(60));
    a.migration = MigrationArgs {
        // The drain deadline, not a stall, must move a paused answer.
        stall_timeout: Some(Duration::from_secs(120)),
        ..MigrationArgs::default()
    };
    Router::start(&valkey.url(), a).await
}

/// Waits until `id`'s listing says `status` (`live`, `draining`) or, for
/// `None`, until it has no incarnation left.
async fn wait_status(r: &Router, id: &str, status: Option<&str>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, v) = get(r, &format!("/admin/workers?model={MODEL}")).await;
        let rows = v["workers"].as_array().cloned().unwrap_or_default();
        let live: Vec<&Value> = rows
            .iter()
            .filter(|w| w["worker_id"] == id && w["status"] != "expired")
            .filter(|w| w["status"] == "live" || w["lease_left_ms"].as_i64().unwrap_or(-1) > 0)
            .collect();
        let ok = match status {
            Some(s) => live.iter().any(|w| w["status"] == s),
            None => live.is_empty(),
        };
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "{id} not {status:?} in {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn doc(topic: &str) -> String {
    (0..40)
        .map(|i| format!("Line {i} of the {topic} document, repeated for length.\n"))
        .collect()
}

fn completion(topic: &str, max_tokens: u32) -> Value {
    json!({"model": MODEL, "prompt": doc(topic), "max_tokens": max_tokens, "stream": true,
           "stream_options": {"include_usage": true}})
}

/// A streamed answer being read.
struct Reading {
    worker: Option<String>,
    bytes:
        std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Reading {
    async fn start(r: &Router, body: &Value) -> Reading {
        let resp = http()
            .post(r.url("/v1/completions"))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let worker = resp
            .headers()
            .get("x-prefix-router-worker")
            .map(|v| v.to_str().unwrap().to_owned());
        let mut reading = Reading {
            worker,
            bytes: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
        };
        let first = reading.bytes.next().await.unwrap().unwrap();
        reading.buf.extend_from_slice(&first);
        reading
    }

    /// The rest of the answer: its text, and whether it ended whole (one
    /// finish reason, `[DONE]`, no error event, no cut).
    async fn finish(mut self) -> (String, bool) {
        let mut cut = false;
        while let Some(part) = self.bytes.next().await {
            match part {
                Ok(b) => self.buf.extend_from_slice(&b),
                Err(_) => {
                    cut = true;
                    break;
                }
            }
        }
        answer(&String::from_utf8(self.buf).unwrap(), cut)
    }
}

fn answer(text: &str, cut: bool) -> (String, bool) {
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.into())))
        .collect();
    let chunks = || events.iter().filter(|e| e.get("choices").is_some());
    let words: String = chunks()
        .filter_map(|e| e.pointer("/choices/0/text").and_then(Value::as_str))
        .collect();
    let finished = chunks()
        .filter(|e| {
            !e.pointer("/choices/0/finish_reason")
                .unwrap_or(&Value::Null)
                .is_null()
        })
        .count();
    let whole = !cut
        && finished == 1
        && events.last() == Some(&json!("[DONE]"))
        && events.iter().all(|e| e.get("error").is_none());
    (words, whole)
}

/// The worker a whole request is sent to, and its answer.
async fn served(r: &Router, body: &Value) -> (String, String) {
    let reading = Reading::start(r, body).await;
    let worker = reading.worker.clone().expect("a worker header");
    let (text, whole) = reading.finish().await;
    assert!(whole, "{worker}: {text}");
    (worker, text)
}

async fn admin(r: &Router, method: reqwest::Method, path: &str, token: bool) -> (u16, Value) {
    let mut req = http().request(method, r.url(path));
    if token {
        req = req.bearer_auth(TOKEN);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drained_worker_gets_nothing_new_from_any_router_until_undrained() {
    let valkey = Valkey::start();
    let (r1, r2) = (router(&valkey).await, router(&valkey).await);
    let _a = start_sim(&r1, "a").await;
    wait_status(&r1, "a", Some("live")).await;
    // `a` alone answers these first, so it holds their prompts: routing
    // prefers it for them from then on.
    let bodies: Vec<Value> = (0..3)
        .map(|i| completion(&format!("held {i}"), 8))
        .collect();
    for b in &bodies {
        assert_eq!(served(&r1, b).await.0, "a");
    }
    let _b = start_sim(&r1, "b").await;
    wait_status(&r1, "b", Some("live")).await;
    for r in [&r1, &r2] {
        assert_eq!(served(r, &bodies[0]).await.0, "a");
    }

    // The admin route wants the token, a worker it knows, a sane deadline.
    let path = format!("/admin/workers/a/drain?model={MODEL}&deadline=60s");
    let (st, _) = admin(&r1, reqwest::Method::POST, &path, false).await;
    assert_eq!(st, 401);
    for bad in ["deadline=soon", "deadline=25h"] {
        let p = format!("/admin/workers/a/drain?model={MODEL}&{bad}");
        let (st, v) = admin(&r1, reqwest::Method::POST, &p, true).await;
        assert_eq!(st, 400, "{bad}: {v}");
    }
    let unknown = format!("/admin/workers/nobody/drain?model={MODEL}");
    assert_eq!(
        admin(&r1, reqwest::Method::POST, &unknown, true).await.0,
        404
    );

    let (st, v) = admin(&r1, reqwest::Method::POST, &path, true).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["draining"], true);
    let left = v["deadline_ms"].as_u64().unwrap();
    assert!(left > 50_000 && left <= 60_000, "{v}");
    // At once, on both routers (the other one too): every request to `b`
    // (all but the last prompt, which `a` alone keeps holding).
    for r in [&r2, &r1] {
        for b in &bodies[..2] {
            assert_eq!(served(r, b).await.0, "b", "a draining worker was routed to");
        }
    }
    wait_status(&r2, "a", Some("draining")).await;

    // Undrained (on the other router): routed to again.
    let undrain = format!("/admin/workers/a/drain?model={MODEL}");
    let (st, v) = admin(&r2, reqwest::Method::DELETE, &undrain, true).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["draining"], false);
    wait_status(&r1, "a", Some("live")).await;
    assert_eq!(served(&r1, &bodies[2]).await.0, "a");
    assert_eq!(served(&r2, &bodies[2]).await.0, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_the_drain_deadline_a_running_answer_moves_token_for_token() {
    let valkey = Valkey::start();
    let (r1, r2) = (router(&valkey).await, router(&valkey).await);
    let a = start_sim(&r1, "a").await;
    wait_status(&r1, "a", Some("live")).await;
    let body = completion("moved at the deadline", 40);
    let (worker, twin) = served(&r1, &body).await;
    assert_eq!(worker, "a");
    let _b = start_sim(&r1, "b").await;
    wait_status(&r1, "b", Some("live")).await;

    // Relayed by r2; drained through r1, which r2 learns from Valkey.
    let reading = Reading::start(&r2, &body).await;
    assert_eq!(reading.worker.as_deref(), Some("a"));
    let pause = |on: bool| {
        let url = format!("{}/sim/faults", a.url);
        async move {
            let r = http()
                .post(url)
                .json(&json!({"paused": on}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    };
    pause(true).await;
    let started = Instant::now();
    let path = format!("/admin/workers/a/drain?model={MODEL}&deadline=1s");
    let (st, v) = admin(&r1, reqwest::Method::POST, &path, true).await;
    assert_eq!(st, 200, "{v}");
    let (text, whole) = reading.finish().await;
    // The stall timeout is 120 s: only the deadline could have moved it.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert!(whole, "{text}");
    assert_eq!(text, twin, "the moved answer differs from its twin");
    let m = support::metrics_text(&r2).await;
    assert!(
        m.lines()
            .any(|l| l.starts_with("prefix_router_migrations_total{outcome=\"migrated\"}")),
        "{m}"
    );
    pause(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sim_stopped_with_sigterm_drains_finishes_its_answer_and_comes_back() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let spec = sim_spec(&r, "a");
    let mut a = spec.start(Duration::from_secs(60)).await.unwrap();
    wait_status(&r, "a", Some("live")).await;
    let long = completion("a long answer", 100);
    let (_, twin) = served(&r, &long).await;
    let short = completion("a short one", 4);
    assert_eq!(served(&r, &short).await.0, "a");
    let _b = start_sim(&r, "b").await;
    wait_status(&r, "b", Some("live")).await;

    let reading = Reading::start(&r, &long).await;
    assert_eq!(reading.worker.as_deref(), Some("a"));
    a.proc.signal_term();
    wait_status(&r, "a", Some("draining")).await;
    // Draining: nothing new for `a`, though it holds this prompt.
    assert_eq!(served(&r, &short).await.0, "b");
    // Its running answer finishes there, whole.
    let (text, whole) = reading.finish().await;
    assert!(whole, "{text}");
    assert_eq!(text, twin);
    // Then it deregisters and exits.
    wait_status(&r, "a", None).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.proc.exited().is_none() {
        assert!(Instant::now() < deadline, "the drained sim did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Restarted under the same id: routed to again (with `b` drained, it
    // is the only choice).
    let _a = spec.start(Duration::from_secs(60)).await.unwrap();
    wait_status(&r, "a", Some("live")).await;
    let path = format!("/admin/workers/b/drain?model={MODEL}");
    assert_eq!(admin(&r, reqwest::Method::POST, &path, true).await.0, 200);
    assert_eq!(served(&r, &completion("after the restart", 4)).await.0, "a");
}

/// While Valkey is away, routing falls back to the workers last seen live;
/// a worker this router knows is draining is not among them (the atomic
/// step skips it; before, the fallback's consistent hash sent it about half
/// the requests).
#[tokio::test]
async fn while_valkey_is_away_the_fallback_sends_a_draining_worker_nothing() {
    use support::fake_worker::FakeWorker;
    const M: &str = "m";
    let valkey = Valkey::start();
    let (w0, w1) = (FakeWorker::start("w0").await, FakeWorker::start("w1").await);
    w0.register_in(&valkey, M).await;
    w1.register_in(&valkey, M).await;
    let mut a = args();
    a.valkey_timeout = Some(Duration::from_millis(20));
    let r = Router::start(&valkey.url(), a).await;
    let send = |prompt: String| {
        http()
            .post(r.url("/v1/completions"))
            .json(&json!({"model": M, "prompt": prompt, "max_tokens": 1}))
            .send()
    };
    // The router sees both workers live.
    for i in 0..4 {
        assert_eq!(send(format!("warm {i}")).await.unwrap().status(), 200);
    }
    let path = format!("/admin/workers/w1/drain?model={M}&deadline=60s");
    let (st, v) = support::post(&r, &path, &json!({})).await;
    assert_eq!(st, 200, "{v}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    w1.shared.bodies.lock().unwrap().clear();
    w0.shared.bodies.lock().unwrap().clear();
    let mut c = valkey.conn();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(4000)
        .arg("ALL")
        .query::<()>(&mut c)
        .unwrap();
    for i in 0..12 {
        let resp = send(format!("while away {i}")).await.unwrap();
        assert_eq!(resp.status(), 200);
    }
    let (to_w0, to_w1) = (
        w0.shared.bodies.lock().unwrap().len(),
        w1.shared.bodies.lock().unwrap().len(),
    );
    assert_eq!((to_w0, to_w1), (12, 0), "the draining w1 got requests");
}
