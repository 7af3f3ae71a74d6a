//! Prefill/decode disaggregation over real HTTP on loopback, with the KV
//! events over real ZeroMQ: a prefill worker's handshake answer, a decode
//! worker taking the transfer (blocks cached and reported, TTFT without
//! the prefill compute), the 400s, the roles in heartbeats, and `both`
//! answering as it always did.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Json;
use axum::extract::{Path, State};
use axum::routing::post;
use common::{MODEL, Sim, completion, config, hex_set, prompt, sample};
use protocol::WorkerRole;
use protocol::kv_events::KvEvent;
use protocol::kv_transfer::{self, KvTransfer};
use serde_json::{Value, json};
use sim_worker::server::PushSettings;

/// Asks the prefill sim for a remote decode's prefill of `text`; returns
/// its whole answer.
async fn prefill(sim: &Sim, text: &str) -> Value {
    let mut body = completion(text, 1);
    body["kv_transfer_params"] = kv_transfer::prefill_request();
    let resp = sim.complete(&body).await;
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

fn stored_hashes(events: &[KvEvent], medium: &str) -> BTreeSet<String> {
    events
        .iter()
        .filter_map(|e| match e {
            KvEvent::BlockStored(s) if s.medium.as_deref() == Some(medium) => Some(s),
            _ => None,
        })
        .flat_map(|s| s.block_hashes.iter().map(|h| h.to_block_hash().to_hex()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefill_worker_answers_the_handshake_as_vllms_nixl_connector() {
    let mut p = Sim::start(config("p-0", WorkerRole::Prefill)).await;
    p.warm_up().await;
    let before = hex_set(&p.state().await["cached_hashes"]);
    let text = prompt("handshake", 20);
    let answer = prefill(&p, &text).await;
    let params = &answer["kv_transfer_params"];
    let prompt_tokens = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(answer["usage"]["completion_tokens"], 1);
    // vLLM's keys and values (pull_scheduler.request_finished).
    assert_eq!(params["do_remote_prefill"], true);
    assert_eq!(params["do_remote_decode"], false);
    assert_eq!(params["remote_engine_id"], "p-0");
    assert_eq!(params["remote_request_id"], answer["id"]);
    assert_eq!(params["remote_host"], "127.0.0.1");
    assert_eq!(params["remote_port"], p.server.addr().port());
    assert_eq!(params["remote_num_tokens"], prompt_tokens);
    assert_eq!(
        (params["tp_size"].clone(), params["pp_size"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(params["transfer_mode"], "pull");
    assert!(params["remote_blocks_expiry_time"].is_null());
    let groups = params["remote_block_ids"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "one KV-cache group");
    let ids: BTreeSet<u64> = groups[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        ids.len() as u64,
        prompt_tokens.div_ceil(16),
        "one distinct block per prompt block"
    );
    // The hashes are the prompt's full blocks, which it now caches and
    // reported as stored on the GPU.
    let hashes = hex_set(&params["remote_block_hashes"]);
    assert_eq!(hashes.len() as u64, prompt_tokens / 16);
    let after = hex_set(&p.state().await["cached_hashes"]);
    assert_eq!(
        after.difference(&before).cloned().collect::<BTreeSet<_>>(),
        hashes
    );
    let events = p
        .events_until(|ev| stored_hashes(ev, "GPU").is_superset(&hashes))
        .await;
    assert!(stored_hashes(&events, "CPU").is_empty());
    // It parses as what a decode worker takes.
    assert!(matches!(
        kv_transfer::parse(Some(params)),
        Ok(KvTransfer::RemotePrefill(_))
    ));
    let metrics = p.metrics().await;
    assert_eq!(sample(&metrics, "sim:prefill_handoffs_total"), Some(1.0));
    assert!(
        metrics.contains("sim:role_info{model_name=\"qwen3\",engine=\"0\",role=\"prefill\"} 1.0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_worker_takes_the_transfer_caches_the_blocks_and_skips_the_prefill() {
    // Real time, so that the prefill compute (100 µs a token) dwarfs the
    // transfer and the decode worker's last-token compute.
    let p = Sim::start(config("p-0", WorkerRole::Prefill)).await;
    let mut d = Sim::start(config("d-0", WorkerRole::Decode)).await;
    d.warm_up().await;
    let text = prompt("transfer", 300); // about 3,600 tokens
    let started = Instant::now();
    let answer = prefill(&p, &text).await;
    let prefill_took = started.elapsed();
    let params = answer["kv_transfer_params"].clone();
    let prompt_tokens = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    let compute = std::time::Duration::from_micros(100 * prompt_tokens);
    assert!(prefill_took >= compute, "{prefill_took:?} < {compute:?}");

    let mut body = completion(&text, 4);
    body["kv_transfer_params"] = params.clone();
    let resp = d.complete(&body).await;
    assert_eq!(resp.status(), 200);
    let remote: u64 = resp.headers()["x-sim-remote-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(resp.headers()["x-sim-cached-tokens"], "0");
    assert_eq!(
        remote,
        prompt_tokens - 1,
        "all but the recomputed last token"
    );
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(
        answer["usage"]["prompt_tokens_details"]["cached_tokens"],
        prompt_tokens - 1
    );
    assert!(answer.get("kv_transfer_params").is_none());
    // The prefill was skipped: all but the last token counted as pulled,
    // not computed (the headers above, `sim:remote_prefill_tokens` below).
    // Not a wall-clock bound: the decode's time is a load test's to show.

    // The received blocks are cached and reported as stored on the GPU.
    let hashes = hex_set(&params["remote_block_hashes"]);
    assert!(hex_set(&d.state().await["cached_hashes"]).is_superset(&hashes));
    let events = d
        .events_until(|ev| stored_hashes(ev, "GPU").is_superset(&hashes))
        .await;
    let tokens: usize = events
        .iter()
        .filter_map(|e| match e {
            KvEvent::BlockStored(s) => Some(s.token_ids.len()),
            _ => None,
        })
        .sum();
    assert_eq!(tokens, 16 * hashes.len(), "stored with their tokens");
    let metrics = d.metrics().await;
    assert_eq!(sample(&metrics, "sim:remote_prefills_total"), Some(1.0));
    assert_eq!(
        sample(&metrics, "sim:remote_prefill_tokens_total"),
        Some((prompt_tokens - 1) as f64)
    );

    // Without params (skip-prefill), a decode worker prefills itself.
    let resp = d.complete(&completion(&prompt("skip", 10), 2)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("x-sim-remote-tokens").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_a_worker_cannot_act_on_are_400s_in_vllms_shape() {
    let p = Sim::start(config("p-0", WorkerRole::Prefill)).await;
    let d = Sim::start(config("d-0", WorkerRole::Decode)).await;
    let text = prompt("refusals", 10);
    let good = prefill(&p, &text).await["kv_transfer_params"].clone();
    let mut no_port = good.clone();
    no_port.as_object_mut().unwrap().remove("remote_port");
    let mut other_blocks = good.clone();
    other_blocks["remote_block_hashes"] = json!(["0000000000000001"]);
    let mut streamed = completion(&text, 1);
    streamed["stream"] = json!(true);
    streamed["kv_transfer_params"] = kv_transfer::prefill_request();
    let with = |params: Value| {
        let mut body = completion(&text, 2);
        body["kv_transfer_params"] = params;
        body
    };
    for (sim, body, says) in [
        (&d, with(no_port), "needs remote_port"),
        (&d, with(other_blocks), "not this prompt's"),
        (&d, with(json!("yes")), "must be an object"),
        (&d, with(kv_transfer::prefill_request()), "role is decode"),
        (&p, with(good.clone()), "role is prefill"),
        (&p, streamed, "stream false"),
    ] {
        let resp = sim.complete(&body).await;
        assert_eq!(resp.status(), 400, "{says}");
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["error"]["type"], "BadRequestError");
        assert_eq!(err["error"]["code"], 400);
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ignores_kv_transfer_params_and_shows_what_it_always_did() {
    let sim = Sim::start(config("b-0", WorkerRole::Both)).await;
    let mut body = completion(&prompt("colocated", 10), 2);
    body["kv_transfer_params"] = kv_transfer::prefill_request();
    let resp = sim.complete(&body).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("x-sim-remote-tokens").is_none());
    let answer: Value = resp.json().await.unwrap();
    assert!(answer.get("kv_transfer_params").is_none());
    assert_eq!(answer["usage"]["completion_tokens"], 2);
    // Params a decode worker would refuse are not even read.
    body["kv_transfer_params"] = json!({"do_remote_prefill": true});
    assert_eq!(sim.complete(&body).await.status(), 200);
    let metrics = sim.metrics().await;
    assert!(
        !metrics.contains("sim:role_info") && !metrics.contains("sim:cpu_"),
        "{metrics}"
    );
    let state = sim.state().await;
    assert!(state.get("role").is_none() && state.get("cpu_tier").is_none());
}

/// A stand-in fleet that records heartbeat bodies and accepts the rest.
async fn stub_fleet() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route(
            "/internal/{*op}",
            post(
                |State(seen): State<Arc<Mutex<Vec<Value>>>>,
                 Path(op): Path<String>,
                 Json(body): Json<Value>| async move {
                    if op == "heartbeat" {
                        seen.lock().unwrap().push(body.clone());
                    }
                    // One reply that parses as every operation's.
                    Json(json!({
                        "worker_id": body["worker_id"], "model": MODEL, "lease_ms": 15000,
                        "incarnation": 1, "registered": false, "inserted": 0, "promoted": 0,
                        "refreshed": 0, "removed": 0, "unchanged": true, "differing": [],
                    }))
                },
            ),
        )
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_register_the_role_and_both_sends_none() {
    let (fleet, seen) = stub_fleet().await;
    let mut sims = Vec::new();
    for (id, role) in [
        ("p-0", WorkerRole::Prefill),
        ("d-0", WorkerRole::Decode),
        ("b-0", WorkerRole::Both),
    ] {
        let mut c = config(id, role);
        c.kv_events = None;
        c.push = Some(PushSettings::new(fleet.clone(), None));
        sims.push(sim_worker::server::SimServer::start(c, None).await.unwrap());
    }
    let deadline = Instant::now() + common::PATIENCE;
    let roles = loop {
        let roles: std::collections::BTreeMap<String, Value> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|hb| {
                (
                    hb["worker_id"].as_str().unwrap().to_owned(),
                    hb.get("role").cloned().unwrap_or(Value::Null),
                )
            })
            .collect();
        if roles.len() == 3 {
            break roles;
        }
        assert!(Instant::now() < deadline, "heartbeats: {roles:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(roles["p-0"], "prefill");
    assert_eq!(roles["d-0"], "decode");
    assert_eq!(roles["b-0"], Value::Null);
    drop(sims);
}
