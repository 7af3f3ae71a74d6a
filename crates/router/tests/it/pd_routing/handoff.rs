//! A P/D request: prefilled then decoded with vLLM's exact bodies, a failed
//! prefill handled, explain's two picks.

use super::*;

/// The params a vLLM prefill worker named `name` answers with (the NIXL
/// connector's `request_finished`).
fn handoff_params(name: &str) -> Value {
    json!({
        "do_remote_prefill": true, "do_remote_decode": false,
        "remote_block_ids": [[7, 8, 9]], "remote_engine_id": name,
        "remote_request_id": format!("cmpl-{name}-1"), "remote_host": "127.0.0.1",
        "remote_port": 5600, "tp_size": 1, "dcp_size": 1, "pp_size": 1,
        "remote_num_tokens": 40, "remote_blocks_expiry_time": null,
        "transfer_mode": "pull",
    })
}

/// A fake prefill worker: its answers carry [`handoff_params`].
async fn prefill_worker(name: &str) -> FakeWorker {
    let w = FakeWorker::start(name).await;
    *w.shared.kv_transfer_params.lock().unwrap() = Some(handoff_params(name));
    w
}

/// A router with prefill worker `p0` and decode worker `d0` registered.
async fn pd_pair() -> (Valkey, Router, FakeWorker, FakeWorker) {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let p = prefill_worker("p0").await;
    let d = FakeWorker::start("d0").await;
    join(&r, p.name(), &p.url(), Some("prefill")).await;
    join(&r, d.name(), &d.url(), Some("decode")).await;
    (valkey, r, p, d)
}

/// The bodies a fake worker received.
fn bodies(w: &FakeWorker) -> Vec<Value> {
    w.shared.bodies.lock().unwrap().clone()
}

/// A URL nothing listens on: a prefill worker that is down.
fn dead_url() -> String {
    format!("http://127.0.0.1:{}", free_port().unwrap())
}

/// The last body the fake worker received.
fn last_body(w: &FakeWorker) -> Value {
    w.shared.bodies.lock().unwrap().last().cloned().unwrap()
}

/// `/admin/workers`'s in-flight count of each worker, by id.
async fn in_flight(r: &Router) -> Vec<(String, u64)> {
    let (_, v) = get(r, &format!("/admin/workers?model={M}")).await;
    v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let id = w["worker_id"].as_str().unwrap().to_owned();
            (id, w["in_flight"].as_u64().unwrap())
        })
        .collect()
}

/// Polls until `id` has `want` requests in flight (or fails after 5 s).
async fn wait_in_flight(r: &Router, id: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let all = in_flight(r).await;
        if all.iter().any(|(w, n)| w == id && *n == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never had {want} in flight: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The prefill body vLLM's proxies send for `client`'s request.
fn prefill_body(client: &Value) -> Value {
    let mut want = client.clone();
    let obj = want.as_object_mut().unwrap();
    obj.remove("stream_options");
    obj.insert("max_tokens".into(), 1.into());
    if obj.contains_key("max_completion_tokens") {
        obj.insert("max_completion_tokens".into(), 1.into());
    }
    obj.insert("stream".into(), false.into());
    obj.insert(
        "kv_transfer_params".into(),
        json!({"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
            "remote_block_ids": null, "remote_host": null, "remote_port": null}),
    );
    want
}

/// `client` with the params the decode worker must get.
fn with_params(client: &Value, params: Value) -> Value {
    let mut want = client.clone();
    want["kv_transfer_params"] = params;
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_is_prefilled_then_decoded_with_vllms_exact_bodies() {
    let (valkey, r, p, d) = pd_pair().await;
    let (_, listed) = get(&r, &format!("/admin/workers?model={M}")).await;
    for w in listed["workers"].as_array().unwrap() {
        let want = if w["worker_id"] == "p0" {
            "prefill"
        } else {
            "decode"
        };
        assert_eq!(w["role"], want, "{w}");
    }

    let body = json!({"model": M, "prompt": text("fox", 30), "max_tokens": 20, "temperature": 0});
    let a = complete(&r, "/v1/completions", &body).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        (a.worker.as_deref(), a.prefill.as_deref()),
        (Some("d0"), Some("p0"))
    );
    assert_eq!(bodies(&p), vec![prefill_body(&body)]);
    assert_eq!(last_body(&d), with_params(&body, handoff_params("p0")));
    let answer: Value = serde_json::from_str(&a.text).unwrap();
    assert_eq!(answer["worker"], "d0", "the decode worker's whole answer");
    // Both workers are claimed the prompt's blocks: the prefill worker
    // computes them, the decode worker receives them.
    assert!(!worker_blocks(&valkey, "pr", M, "p0").is_empty());
    assert!(!worker_blocks(&valkey, "pr", M, "d0").is_empty());

    // Streamed: the prefill still answers one JSON; the decode worker's
    // stream is the client's, and counts in flight until it ends, the
    // prefill worker only until its answer.
    let streamed = json!({"model": M, "prompt": text("cat", 30), "max_tokens": 20,
        "stream": true, "stream_options": {"include_usage": true}});
    let resp = http()
        .post(r.url("/v1/completions"))
        .json(&streamed)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    wait_in_flight(&r, "d0", 1).await;
    wait_in_flight(&r, "p0", 0).await;
    for _ in SSE_CHUNKS {
        d.release.send(()).unwrap();
    }
    assert_eq!(resp.text().await.unwrap(), SSE_CHUNKS.concat());
    wait_in_flight(&r, "d0", 0).await;
    assert_eq!(bodies(&p).last(), Some(&prefill_body(&streamed)));
    assert_eq!(last_body(&d), with_params(&streamed, handoff_params("p0")));

    // Chat: max_completion_tokens is 1 for the prefill too.
    let chat = json!({"model": M, "max_completion_tokens": 30, "stream": true,
        "messages": [{"role": "user", "content": text("chat", 20)}]});
    let a = complete(&r, "/v1/chat/completions", &chat).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.prefill.as_deref(), Some("p0"));
    assert_eq!(a.text, SSE_CHUNKS.concat());
    assert_eq!(bodies(&p).last(), Some(&prefill_body(&chat)));
    assert_eq!(last_body(&d), with_params(&chat, handoff_params("p0")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_prefill_goes_to_another_prefill_worker_or_leaves_decode_alone() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let p = prefill_worker("p1").await;
    let d = FakeWorker::start("d0").await;
    join(&r, "p-down", &dead_url(), Some("prefill")).await;
    join(&r, p.name(), &p.url(), Some("prefill")).await;
    join(&r, d.name(), &d.url(), Some("decode")).await;

    // Whichever prefill worker is picked first, the live one prefills.
    for i in 0..4 {
        let body = json!({"model": M, "prompt": text(&format!("doc{i}"), 25), "max_tokens": 5});
        let a = complete(&r, "/v1/completions", &body).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(
            (a.worker.as_deref(), a.prefill.as_deref()),
            (Some("d0"), Some("p1"))
        );
        assert_eq!(last_body(&d), with_params(&body, handoff_params("p1")));
    }
    // No prefill worker gives params (an error, an answer without them, a
    // refusal of the request itself): the decode worker gets the client's
    // request as sent and answers it alone, one whole answer.
    let failures = [
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(handoff_params("p1")),
        ),
        (StatusCode::OK, None),
        (StatusCode::BAD_REQUEST, Some(handoff_params("p1"))),
    ];
    for (i, mode) in failures.into_iter().enumerate() {
        *p.shared.status.lock().unwrap() = Some(mode.0);
        *p.shared.kv_transfer_params.lock().unwrap() = mode.1.clone();
        let tried = bodies(&p).len();
        let body = json!({"model": M, "prompt": text(&format!("alone{i}"), 25), "max_tokens": 5});
        let a = complete(&r, "/v1/completions", &body).await;
        assert_eq!(a.status, 200, "{mode:?}: {}", a.text);
        assert_eq!(
            (a.worker.as_deref(), a.prefill),
            (Some("d0"), None),
            "{mode:?}"
        );
        assert_eq!(last_body(&d), body, "{mode:?}");
        let answer: Value = serde_json::from_str(&a.text).unwrap();
        assert_eq!((&answer["worker"], &answer["echo"]), (&json!("d0"), &body));
        assert_eq!(bodies(&p).len(), tried + 1, "{mode:?}: one attempt");
    }
    for id in ["p-down", "p1", "d0"] {
        wait_in_flight(&r, id, 0).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_shows_both_picks_and_a_decode_holding_the_prompt_skips_the_prefill() {
    let (_valkey, r, p, d) = pd_pair().await;
    let body = json!({"model": M, "prompt": text("turns", 40), "max_tokens": 5});

    let (st, e) = post(&r, "/admin/explain", &body).await;
    assert_eq!(st, 200, "{e}");
    let pd = &e["disaggregation"];
    assert_eq!(pd["skip_prefill"], false, "{e}");
    assert_eq!(pd["prefill"]["worker_id"], "p0", "{e}");
    assert_eq!(pd["decode"]["worker_id"], "d0", "{e}");
    assert_eq!(pd["skip_prefill_share"], 0.8);
    assert!(
        pd["why"].as_str().unwrap().starts_with("prefill first"),
        "{e}"
    );
    assert_eq!(e["chosen"]["worker_id"], "d0", "{e}");
    let roles: Vec<(&str, &str)> = e["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["worker_id"].as_str().unwrap(),
                c["role"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(roles.contains(&("p0", "prefill")) && roles.contains(&("d0", "decode")));

    let a = complete(&r, "/v1/completions", &body).await;
    assert_eq!(a.prefill.as_deref(), Some("p0"));

    // The decode worker now holds the prompt (claimed as it received it):
    // a second turn skips the prefill.
    let (_, e) = post(&r, "/admin/explain", &body).await;
    let pd = &e["disaggregation"];
    assert_eq!(pd["skip_prefill"], true, "{e}");
    assert!(
        pd["why"].as_str().unwrap().starts_with("skip prefill"),
        "{e}"
    );
    assert_eq!(pd["prefill"], Value::Null);
    let held = pd["decode"]["matched_tokens"].as_f64().unwrap();
    assert!(held > 0.8 * e["prompt_tokens"].as_f64().unwrap(), "{e}");
    let a = complete(&r, "/v1/completions", &body).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!((a.worker.as_deref(), a.prefill), (Some("d0"), None));
    assert_eq!(last_body(&d), body, "the client's request, unchanged");
    assert_eq!(bodies(&p).len(), 1, "no second prefill");
}
