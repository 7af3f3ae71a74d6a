//! `sim-worker` over HTTP alone: vLLM's metrics and ORCA header, answers
//! and streams on the time model's schedule, aborts, pause and crash.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::harness::{MODEL, Sim, completion, eventually, prompt};

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// The value of the sample `name{model_name="qwen3",engine="0"...}`.
fn sample(metrics: &str, name: &str) -> f64 {
    let labels = format!("{name}{{model_name=\"{MODEL}\",engine=\"0\"");
    let line = metrics
        .lines()
        .find(|l| l.starts_with(&labels))
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"));
    let value = line.rsplit(' ').next().expect("value");
    assert!(value.contains('.'), "{line}: not a Python float");
    value.parse().expect("number")
}

async fn metrics(sim: &Sim) -> String {
    client()
        .get(sim.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// Sends a non-streamed completion with the ORCA request header `format`;
/// returns the ORCA response header and the body.
async fn with_orca(sim: &Sim, format: Option<&str>, body: &Value) -> (Option<String>, Value) {
    let mut req = client().post(sim.url("/v1/completions")).json(body);
    if let Some(f) = format {
        req = req.header("endpoint-load-metrics-format", f);
    }
    let resp = req.send().await.expect("completion");
    assert_eq!(resp.status(), 200);
    let header = resp
        .headers()
        .get("endpoint-load-metrics")
        .map(|v| v.to_str().expect("ascii").to_owned());
    (header, resp.json().await.expect("body"))
}

/// Checks a TEXT or JSON header's shape; returns (waiting, kv usage).
fn parse_orca(header: &str) -> (f64, f64) {
    let pairs: Vec<(String, f64)> = if let Some(text) = header.strip_prefix("TEXT ") {
        text.split(", ")
            .map(|e| {
                let (k, v) = e.split_once('=').expect("k=v");
                assert!(
                    v.contains('.') || v.contains('e'),
                    "{v}: not a Python float"
                );
                let k = k.strip_prefix("named_metrics.").expect("prefix");
                (k.to_owned(), v.parse().expect("number"))
            })
            .collect()
    } else {
        let json = header.strip_prefix("JSON ").expect("TEXT or JSON");
        assert!(
            json.starts_with("{\"named_metrics\": {\"num_requests_waiting\": "),
            "{json}"
        );
        let v: Value = serde_json::from_str(json).expect("JSON");
        v["named_metrics"]
            .as_object()
            .expect("object")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_f64().expect("number")))
            .collect()
    };
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["num_requests_waiting", "kv_cache_usage_perc"]);
    (pairs[0].1, pairs[1].1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_orca_headers_look_like_vllms() {
    let sim = Sim::start(&["--time-scale", "0.02"]).await;
    let body = completion(&prompt("metrics", 10), 3, false);
    let (mut prompt_tokens, mut cached) = (0, 0);
    for format in ["TEXT", "json", "PROTO"] {
        let (header, answer) = with_orca(&sim, Some(format), &body).await;
        prompt_tokens += answer["usage"]["prompt_tokens"].as_u64().expect("usage");
        cached += answer["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .expect("cached");
        match format {
            "PROTO" => assert_eq!(header, None),
            _ => {
                let (waiting, kv) = parse_orca(&header.expect("ORCA header"));
                assert!(waiting >= 0.0 && (0.0..=1.0).contains(&kv));
            }
        }
    }
    assert!(cached > 0, "the repeated prompt hit the cache");
    // No header unless asked, and never on a streamed answer.
    let (header, answer) = with_orca(&sim, None, &body).await;
    assert_eq!(header, None);
    prompt_tokens += answer["usage"]["prompt_tokens"].as_u64().expect("usage");
    cached += answer["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached");
    let streamed = client()
        .post(sim.url("/v1/completions"))
        .header("endpoint-load-metrics-format", "TEXT")
        .json(&completion("hi", 2, true))
        .send()
        .await
        .expect("stream");
    assert!(streamed.headers().get("endpoint-load-metrics").is_none());
    let usage_of_stream = streamed.text().await.expect("stream body");
    assert!(usage_of_stream.ends_with("data: [DONE]\n\n"));

    let m = metrics(&sim).await;
    for gauge in ["vllm:num_requests_running", "vllm:num_requests_waiting"] {
        assert_eq!(sample(&m, gauge), 0.0, "{gauge}");
        assert!(m.contains(&format!("# TYPE {gauge} gauge")));
    }
    assert!((0.0..=1.0).contains(&sample(&m, "vllm:kv_cache_usage_perc")));
    let hi_tokens = 1.0; // "hi" is one token, and counted too
    assert!(sample(&m, "vllm:prompt_tokens_total") >= prompt_tokens as f64 + hi_tokens);
    assert_eq!(sample(&m, "vllm:prefix_cache_hits_total"), cached as f64);
    assert_eq!(
        sample(&m, "vllm:prefix_cache_queries_total"),
        sample(&m, "vllm:prompt_tokens_total")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_answers_even_when_the_prompt_cannot_be_reproduced() {
    let sim = Sim::start(&["--time-scale", "0.02"]).await;
    let chat = |content: Value| json!({"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 2});
    let text = chat(json!(prompt("chat", 5)));
    for expected_hit in [false, true] {
        let resp = client()
            .post(sim.url("/v1/chat/completions"))
            .json(&text)
            .send()
            .await
            .expect("chat");
        assert_eq!(resp.status(), 200);
        let answer: Value = resp.json().await.expect("body");
        assert_eq!(answer["object"], "chat.completion");
        let content = answer["choices"][0]["message"]["content"]
            .as_str()
            .expect("text");
        assert!(!content.is_empty(), "{answer}");
        let cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
        assert_eq!(cached > Some(0), expected_hit, "{answer}");
    }
    // An image part: vLLM takes it, the renderer cannot reproduce it.
    let media = chat(json!([
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]));
    for _ in 0..2 {
        let resp = client()
            .post(sim.url("/v1/chat/completions"))
            .json(&media)
            .send()
            .await
            .expect("chat");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-sim-cached-tokens"], "0");
    }
    // Another model is a 404, like vLLM's.
    let other = json!({"model": "other", "prompt": "hi"});
    let resp = client()
        .post(sim.url("/v1/completions"))
        .json(&other)
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status(), 404);
}

/// Reads a streamed answer; returns the arrival time of each `data:` event
/// (relative to `start`) and its payload.
async fn read_events(resp: reqwest::Response, start: Instant) -> Vec<(Duration, String)> {
    let mut events = Vec::new();
    let mut buf = String::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        buf.push_str(std::str::from_utf8(&chunk.expect("chunk")).expect("utf-8"));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let data = event.trim().strip_prefix("data: ").expect("data event");
            events.push((start.elapsed(), data.to_owned()));
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_follow_the_time_model_and_disconnects_abort() {
    let sim = Sim::start(&["--decode-ms-per-token", "150", "--time-scale", "1"]).await;
    let start = Instant::now();
    let resp = client()
        .post(sim.url("/v1/completions"))
        .json(&completion(&prompt("stream", 4), 6, true))
        .send()
        .await
        .expect("stream");
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(resp.headers()["x-sim-cached-tokens"], "0");
    let events = read_events(resp, start).await;
    let payloads: Vec<&str> = events.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(payloads.len(), 7, "{payloads:?}");
    assert_eq!(payloads[6], "[DONE]");
    let chunks: Vec<Value> = payloads[..6]
        .iter()
        .map(|p| serde_json::from_str(p).expect("JSON chunk"))
        .collect();
    assert!(
        chunks.iter().all(|c| c["choices"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty())),
        "{chunks:?}"
    );
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "length");
    // Five decode steps of 150 ms: the schedule cannot be beaten, and the
    // tokens cannot all have come at once.
    let (first, last) = (events[0].0, events[5].0);
    assert!(last >= Duration::from_millis(750), "{last:?}");
    assert!(
        last - first >= Duration::from_millis(375),
        "{first:?}..{last:?}"
    );
    assert!(events.windows(2).all(|w| w[0].0 <= w[1].0));

    // Chat: the role first, then the tokens, then usage when asked.
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}});
    let resp = client()
        .post(sim.url("/v1/chat/completions"))
        .json(&chat)
        .send()
        .await
        .expect("chat");
    let events = read_events(resp, Instant::now()).await;
    let data: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).expect("JSON chunk"))
        .collect();
    assert_eq!(data[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        data[2]["choices"][0]["delta"]["content"].is_string(),
        "{data:?}"
    );
    assert_eq!(data[3]["usage"]["completion_tokens"], 2);
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("[DONE]"));

    // A client that goes away mid-stream aborts its request in the engine.
    let resp = client()
        .post(sim.url("/v1/completions"))
        .json(&completion(&prompt("abandoned", 4), 1000, true))
        .send()
        .await
        .expect("stream");
    let mut body = resp.bytes_stream();
    body.next().await.expect("first chunk").expect("bytes");
    assert_eq!(
        sample(&metrics(&sim).await, "vllm:num_requests_running"),
        1.0
    );
    drop(body);
    eventually("the abandoned request to be aborted", || async {
        let state = sim.state().await;
        (state["counters"]["aborted"] == 1 && state["gauges"]["num_requests_running"] == 0)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_hangs_and_a_crashed_one_exits() {
    let mut sim = Sim::start(&["--time-scale", "0.02"]).await;
    let faults = sim.faults(json!({"paused": true})).await;
    assert_eq!(faults["paused"], true);
    let url = sim.url("/v1/completions");
    let pending = tokio::spawn(async move {
        client()
            .post(url)
            .json(&completion("hello", 2, false))
            .send()
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending.is_finished(), "a paused worker answered");
    // The controls still answer; unpausing releases the request.
    sim.faults(json!({"paused": false})).await;
    let resp = pending.await.expect("task").expect("answer");
    assert_eq!(resp.status(), 200);

    let crash = client()
        .post(sim.url("/sim/faults"))
        .json(&json!({"crash": true}))
        .send()
        .await;
    assert!(crash.is_err(), "a crashing worker answered");
    assert_eq!(sim.wait_exit().code(), Some(137));
}
