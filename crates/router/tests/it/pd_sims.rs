//! Prefill/decode disaggregation (issue 14) end to end: `sim-worker --role
//! prefill` and `--role decode` processes registering through a real
//! router on a real valkey-server. The decode sim pulls the KV the prefill
//! sim handed over; a later turn of a conversation, which the decode sim
//! already holds, skips the prefill; a dead prefill sim is replaced by
//! another, and without any the decode sim answers alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Router, TOKEN, Valkey, args, get, http, tokenizer_dir};

/// The model the sims serve.
const MODEL: &str = "qwen3";

/// A sim of `role` reporting to router `r` as `id` ([`fleet::SimSpec`]);
/// killed on drop, like a crash.
async fn start_sim(r: &Router, id: &str, role: &str) -> fleet::Sim {
    let program = fleet::binaries::workspace_binary("sim-worker").unwrap();
    let log = std::path::PathBuf::from("/dev/null");
    fleet::SimSpec::new(id, program, MODEL, tokenizer_dir(), log)
        .worker_id(id)
        .pushing(&r.url(""), TOKEN)
        .args(["--role", role, "--time-scale", "0.02"])
        .parallel_prefill()
        .start(Duration::from_secs(60))
        .await
        .expect("sim-worker did not start")
}

async fn router(valkey: &Valkey) -> Router {
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(60));
    Router::start(&valkey.url(), a).await
}

/// Waits until every (id, role) is listed live with that role.
async fn wait_live(r: &Router, want: &[(&str, &str)]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, v) = get(r, &format!("/admin/workers?model={MODEL}")).await;
        let rows = v["workers"].as_array().cloned().unwrap_or_default();
        let live = |id: &str, role: &str| {
            rows.iter()
                .any(|w| w["worker_id"] == id && w["role"] == role && w["status"] == "live")
        };
        if want.iter().all(|(id, role)| live(id, role)) {
            return;
        }
        assert!(Instant::now() < deadline, "not live: {want:?} in {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A router with a sim of each (id, role), all listed live.
async fn fleet(sims: &[(&str, &str)]) -> (Valkey, Router, Vec<fleet::Sim>) {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let mut started = Vec::new();
    for (id, role) in sims {
        started.push(start_sim(&r, id, role).await);
    }
    wait_live(&r, sims).await;
    (valkey, r, started)
}

/// A document of about `lines` × 12 tokens, distinct per `topic`.
fn doc(topic: &str, lines: usize) -> String {
    let mut p = format!("Document about {topic}.\n");
    for i in 0..lines {
        p.push_str(&format!(
            "Line {i} of the {topic} document, repeated for length.\n"
        ));
    }
    p
}

/// An answer: status, serving worker, prefill worker, the decode sim's
/// pulled tokens, its cached tokens, the body.
struct Answer {
    status: u16,
    worker: Option<String>,
    prefill: Option<String>,
    remote: u64,
    cached: u64,
    text: String,
}

async fn complete(r: &Router, prompt: &str, stream: bool) -> Answer {
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 6, "stream": stream});
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let header = |n: &str| {
        resp.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let number = |n: &str| -> u64 { header(n).map_or(0, |v| v.parse().unwrap()) };
    let (worker, prefill) = (
        header("x-prefix-router-worker"),
        header("x-prefix-router-prefill-worker"),
    );
    let (remote, cached) = (number("x-sim-remote-tokens"), number("x-sim-cached-tokens"));
    Answer {
        status: resp.status().as_u16(),
        worker,
        prefill,
        remote,
        cached,
        text: resp.text().await.unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sims_hand_the_kv_over_and_a_later_turn_skips_the_prefill() {
    let (_valkey, r, _sims) = fleet(&[("p0", "prefill"), ("d0", "decode")]).await;

    // A new prompt of ~3000 tokens: prefilled by p0, decoded by d0, which
    // pulls its KV.
    let turn1 = doc("conversation", 250);
    let a = complete(&r, &turn1, false).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        (a.worker.as_deref(), a.prefill.as_deref()),
        (Some("d0"), Some("p0"))
    );
    assert!(a.remote > 0, "the decode sim pulled the prompt's KV");
    let said: Value = serde_json::from_str(&a.text).unwrap();
    let said = said["choices"][0]["text"].as_str().unwrap().to_owned();

    // The next turn: d0 holds nearly all of it, so it computes the rest
    // itself, from its cache.
    let turn2 = format!("{turn1}{said}\nAnd then what happened?\n");
    let a = complete(&r, &turn2, false).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!((a.worker.as_deref(), a.prefill), (Some("d0"), None));
    assert_eq!(a.remote, 0, "nothing pulled");
    assert!(a.cached > 2000, "served from its cache: {}", a.cached);

    // Another document is prefilled first again; streamed to the client.
    let a = complete(&r, &doc("weather", 100), true).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.prefill.as_deref(), Some("p0"));
    assert!(a.text.trim_end().ends_with("data: [DONE]"), "{}", a.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_prefill_sim_is_replaced_then_the_decode_sim_answers_alone() {
    let roles = [("p0", "prefill"), ("p1", "prefill"), ("d0", "decode")];
    let (_valkey, r, mut sims) = fleet(&roles).await;
    // p0 crashes; its lease still lists it.
    drop(sims.remove(0));
    for i in 0..3 {
        let a = complete(&r, &doc(&format!("topic {i}"), 60), false).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(
            (a.worker.as_deref(), a.prefill.as_deref()),
            (Some("d0"), Some("p1"))
        );
        assert!(a.remote > 0);
    }
    drop(sims.remove(0));
    let a = complete(&r, &doc("alone", 60), false).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!((a.worker.as_deref(), a.prefill), (Some("d0"), None));
    assert_eq!(a.remote, 0, "it computed the prompt itself");
    let answer: Value = serde_json::from_str(&a.text).unwrap();
    assert!(
        answer["choices"][0]["text"].is_string(),
        "one whole answer: {answer}"
    );
}
