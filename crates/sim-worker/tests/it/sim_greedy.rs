//! The sim as a testable model (issue 29): answers as greedy decoding
//! gives them (token `i` a function of the prompt and the tokens before
//! it, so an answer continued from its prompt plus the tokens generated
//! equals the whole), vLLM's `return_token_ids`, one choice per prompt of
//! a list, and answers broken after N tokens on demand.

use futures_util::StreamExt;
use protocol::WorkerRole;
use serde_json::{Value, json};

use crate::common::{MODEL, Sim, config, prompt};

/// The SSE events of a streamed answer (`[DONE]` as a string), and whether
/// the body failed before its end.
async fn events(resp: reqwest::Response) -> (Vec<Value>, bool) {
    let mut stream = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut failed = false;
    while let Some(part) = stream.next().await {
        match part {
            Ok(b) => buf.extend_from_slice(&b),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    let text = String::from_utf8(buf).expect("utf-8");
    let events = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_owned())))
        .collect();
    (events, failed)
}

async fn post(sim: &Sim, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(sim.url(path))
        .json(body)
        .send()
        .await
        .expect("request")
}

/// The generated ids and text of a streamed answer's choice 0, and the
/// prompt ids it reported.
fn streamed_ids(events: &[Value]) -> (Vec<u64>, String, Vec<u64>) {
    let (mut ids, mut text, mut prompt) = (Vec::new(), String::new(), Vec::new());
    for e in events {
        if let Some(p) = e
            .get("prompt_token_ids")
            .or_else(|| e.pointer("/choices/0/prompt_token_ids"))
            .and_then(Value::as_array)
        {
            prompt = p.iter().map(|v| v.as_u64().unwrap()).collect();
        }
        if let Some(t) = e.pointer("/choices/0/token_ids").and_then(Value::as_array) {
            ids.extend(t.iter().map(|v| v.as_u64().unwrap()));
        }
        let piece = e
            .pointer("/choices/0/text")
            .or_else(|| e.pointer("/choices/0/delta/content"));
        text.push_str(piece.and_then(Value::as_str).unwrap_or(""));
    }
    (ids, text, prompt)
}

#[tokio::test]
async fn an_answer_continued_from_its_tokens_equals_the_whole() {
    let sim = Sim::start(config("g1", WorkerRole::Both)).await;
    let body = json!({"model": MODEL, "prompt": prompt("greedy", 3), "max_tokens": 12,
                      "stream": true, "return_token_ids": true});
    let (evs, failed) = events(post(&sim, "/v1/completions", &body).await).await;
    assert!(!failed);
    let (ids, text, prompt_ids) = streamed_ids(&evs);
    assert_eq!(ids.len(), 12);
    assert!(!prompt_ids.is_empty());
    let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
    assert!(
        distinct.len() > 2,
        "an answer of one repeated token: {ids:?}"
    );
    // The same request unstreamed: the same ids and text.
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let v: Value = post(&sim, "/v1/completions", &whole)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["token_ids"], json!(ids));
    assert_eq!(v["choices"][0]["prompt_token_ids"], json!(prompt_ids));
    assert_eq!(v["choices"][0]["text"], json!(text));
    // Continued after k tokens, from the prompt's ids and those k.
    for k in [1, 5, 11] {
        let mut ids_prompt = prompt_ids.clone();
        ids_prompt.extend(&ids[..k]);
        let cont = json!({"model": MODEL, "prompt": ids_prompt, "max_tokens": 12 - k,
                          "stream": true, "return_token_ids": true});
        let (evs, _) = events(post(&sim, "/v1/completions", &cont).await).await;
        assert_eq!(streamed_ids(&evs).0, ids[k..], "continued after {k}");
    }
    // Without return_token_ids, no ids.
    whole["return_token_ids"] = json!(false);
    let v: Value = post(&sim, "/v1/completions", &whole)
        .await
        .json()
        .await
        .unwrap();
    assert!(v["choices"][0].get("token_ids").is_none());
}

#[tokio::test]
async fn a_chat_answer_continues_from_its_rendered_prompt() {
    let sim = Sim::start(config("g2", WorkerRole::Both)).await;
    let body = json!({"model": MODEL, "max_tokens": 8, "stream": true, "return_token_ids": true,
                      "messages": [{"role": "user", "content": "Tell me about foxes."}]});
    let (evs, failed) = events(post(&sim, "/v1/chat/completions", &body).await).await;
    assert!(!failed);
    assert_eq!(evs[0]["choices"][0]["delta"]["role"], "assistant");
    let (ids, _, prompt_ids) = streamed_ids(&evs);
    assert_eq!(ids.len(), 8);
    assert!(
        !prompt_ids.is_empty(),
        "no prompt_token_ids in {:?}",
        evs[0]
    );
    let mut ids_prompt = prompt_ids.clone();
    ids_prompt.extend(&ids[..3]);
    let cont = json!({"model": MODEL, "prompt": ids_prompt, "max_tokens": 5,
                      "stream": true, "return_token_ids": true});
    let (evs, _) = events(post(&sim, "/v1/completions", &cont).await).await;
    assert_eq!(streamed_ids(&evs).0, ids[3..]);
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let v: Value = post(&sim, "/v1/chat/completions", &whole)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["prompt_token_ids"], json!(prompt_ids));
    assert_eq!(v["choices"][0]["token_ids"], json!(ids));
}

#[tokio::test]
async fn a_list_of_prompts_gets_one_choice_each() {
    let sim = Sim::start(config("g3", WorkerRole::Both)).await;
    let body = json!({"model": MODEL, "prompt": ["first prompt here", "a second, other one"],
                      "max_tokens": 4, "return_token_ids": true});
    let v: Value = post(&sim, "/v1/completions", &body)
        .await
        .json()
        .await
        .unwrap();
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2, "{v}");
    assert_eq!(choices[0]["index"], 0);
    assert_eq!(choices[1]["index"], 1);
    assert_ne!(
        choices[0]["prompt_token_ids"],
        choices[1]["prompt_token_ids"]
    );
    assert_eq!(v["usage"]["completion_tokens"], 8);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (evs, failed) = events(post(&sim, "/v1/completions", &streamed).await).await;
    assert!(!failed);
    for index in [0, 1] {
        let finished = evs
            .iter()
            .filter(|e| e.pointer("/choices/0/index") == Some(&json!(index)))
            .filter(|e| e.pointer("/choices/0/finish_reason") == Some(&json!("length")))
            .count();
        assert_eq!(finished, 1, "choice {index} in {evs:?}");
    }
    assert_eq!(evs[evs.len() - 2]["usage"]["completion_tokens"], 8);
    assert_eq!(evs.last(), Some(&json!("[DONE]")));
}

#[tokio::test]
async fn answers_break_after_n_tokens_on_demand() {
    let sim = Sim::start(config("g4", WorkerRole::Both)).await;
    let set = |fault: Value| {
        let url = sim.url("/sim/faults");
        async move {
            let r = reqwest::Client::new()
                .post(url)
                .json(&json!({ "stream_fault": fault }))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    };
    let body = json!({"model": MODEL, "prompt": "break me", "max_tokens": 10, "stream": true});
    set(json!({"after_tokens": 3, "kind": "cut"})).await;
    let (evs, failed) = events(post(&sim, "/v1/completions", &body).await).await;
    assert!(failed, "the cut stream ended cleanly: {evs:?}");
    assert_eq!(evs.len(), 3, "{evs:?}");
    // Shorter answers are not touched.
    let short = json!({"model": MODEL, "prompt": "short", "max_tokens": 3, "stream": true});
    let (evs, failed) = events(post(&sim, "/v1/completions", &short).await).await;
    assert!(!failed);
    assert_eq!(evs.last(), Some(&json!("[DONE]")));
    // Non-streamed: the connection is cut before the answer ends.
    let mut whole = body.clone();
    whole["stream"] = json!(false);
    let cut = reqwest::Client::new()
        .post(sim.url("/v1/completions"))
        .json(&whole)
        .send()
        .await;
    match cut {
        Ok(resp) => assert!(resp.bytes().await.is_err()),
        Err(e) => assert!(e.is_request(), "{e}"),
    }
    set(json!({"after_tokens": 2, "kind": "error"})).await;
    let (evs, failed) = events(post(&sim, "/v1/completions", &body).await).await;
    assert!(!failed);
    assert_eq!(evs.len(), 4, "{evs:?}");
    assert!(evs[2].get("error").is_some(), "{evs:?}");
    assert_eq!(evs[3], json!("[DONE]"));
    set(Value::Null).await;
    let (evs, failed) = events(post(&sim, "/v1/completions", &body).await).await;
    assert!(!failed);
    assert_eq!(evs.len(), 11);
}
