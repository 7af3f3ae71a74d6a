//! vLLM's render routes and `/tokenize` on `sim-worker`, with the real
//! Qwen3 tokenizer: the ids they return are the ids the sim caches for the
//! same body (its cached block hashes are those ids' hashes, and its
//! `usage.prompt_tokens` their number), for text and token-id
//! completions, a list of prompts, and chat after the template.

use std::collections::BTreeSet;

use protocol::hashing::{BlockHasher, ExtraKeys, HashSeed};
use serde_json::{Value, json};

use super::harness::{MODEL, Sim, prompt};

async fn post(sim: &Sim, path: &str, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(sim.url(path))
        .json(body)
        .send()
        .await
        .expect(path);
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("token ids")
        .iter()
        .map(|t| u32::try_from(t.as_u64().expect("id")).expect("u32"))
        .collect()
}

fn hashes(ids: &[u32]) -> BTreeSet<String> {
    let hasher = BlockHasher::new(16, &HashSeed::from_env_value(None)).expect("hasher");
    hasher
        .block_hashes(ids, &ExtraKeys::default())
        .iter()
        .map(|h| h.to_hex())
        .collect()
}

/// Empties the sim's cache, runs `body` at `path`, and checks that what it
/// cached and counted are `want`'s blocks and length.
async fn caches_exactly(sim: &Sim, path: &str, body: &Value, want: &[u32]) {
    let (status, _) = post(sim, "/sim/reset_prefix_cache", &json!({})).await;
    assert_eq!(status, 200);
    let (status, answer) = post(sim, path, body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["usage"]["prompt_tokens"], want.len(), "{path}");
    assert!(want.len() >= 32, "a prompt of at least two blocks");
    assert_eq!(sim.cached().await, hashes(want), "{path}: cached blocks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_returns_the_ids_the_sim_caches() {
    let sim = Sim::start(&["--time-scale", "0.01"]).await;
    let text = prompt("render", 8);

    // Completions: text.
    let body = json!({"model": MODEL, "prompt": text, "max_tokens": 1});
    let (status, rendered) = post(&sim, "/v1/completions/render", &body).await;
    assert_eq!(status, 200, "{rendered}");
    let items = rendered.as_array().expect("a list");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["model"], MODEL);
    let text_ids = ids(&items[0]["token_ids"]);
    caches_exactly(&sim, "/v1/completions", &body, &text_ids).await;

    // /tokenize agrees.
    let (status, tok) = post(&sim, "/tokenize", &json!({"model": MODEL, "prompt": text})).await;
    assert_eq!(status, 200, "{tok}");
    assert_eq!(ids(&tok["tokens"]), text_ids);
    assert_eq!(tok["count"], text_ids.len());

    // A list of prompts: one item each, in order; token ids as given.
    let other = prompt("another", 4);
    let list = json!({"model": MODEL, "prompt": [text, other]});
    let (_, rendered) = post(&sim, "/v1/completions/render", &list).await;
    let items = rendered.as_array().expect("a list");
    assert_eq!(items.len(), 2);
    assert_eq!(ids(&items[0]["token_ids"]), text_ids);
    let (_, alone) = post(&sim, "/v1/completions/render", &json!({"prompt": other})).await;
    assert_eq!(items[1]["token_ids"], alone[0]["token_ids"]);
    let given: Vec<u32> = (1000..1040).collect();
    let (_, rendered) = post(&sim, "/v1/completions/render", &json!({"prompt": given})).await;
    assert_eq!(ids(&rendered[0]["token_ids"]), given);

    // Chat: after the template (system, user, template kwargs), one object.
    let chat = json!({
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You answer from the document."},
            {"role": "user", "content": text},
        ],
        "chat_template_kwargs": {"enable_thinking": false},
        "max_tokens": 1,
        "cache_salt": "tenant-a",
    });
    let (status, rendered) = post(&sim, "/v1/chat/completions/render", &chat).await;
    assert_eq!(status, 200, "{rendered}");
    assert_eq!(rendered["cache_salt"], "tenant-a");
    let chat_ids = ids(&rendered["token_ids"]);
    assert!(chat_ids.len() > text_ids.len());
    let unsalted = {
        let mut c = chat.clone();
        c.as_object_mut().expect("object").remove("cache_salt");
        c
    };
    caches_exactly(&sim, "/v1/chat/completions", &unsalted, &chat_ids).await;
    let (_, tok) = post(&sim, "/tokenize", &unsalted).await;
    assert_eq!(ids(&tok["tokens"]), chat_ids);

    // Another model is a 404, as on the OpenAI routes.
    let (status, _) = post(
        &sim,
        "/v1/completions/render",
        &json!({"model": "x", "prompt": "a"}),
    )
    .await;
    assert_eq!(status, 404);
}
