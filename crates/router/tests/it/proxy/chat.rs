//! Chat requests claim exactly the blocks vLLM would hash; the next turn
//! follows its prefix; chat the router cannot reproduce is routed by load.

use super::*;

async fn chat(f: &Fleet, body: &Value) -> (u16, String, Value) {
    send(f, "/v1/chat/completions", body).await
}

/// A chat case of the fixtures produced by vLLM 0.33.0.
fn fixture(name: &str) -> (Value, Vec<u32>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tokenize/tests/fixtures/qwen3_chat.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = all["chat"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap();
    let ids = case["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let mut request = case["request"].clone();
    request["model"] = json!(MODEL);
    (request, ids)
}

#[tokio::test]
async fn chat_requests_claim_exactly_the_blocks_vllm_would_hash() {
    let f = fleet(3).await;
    for name in [
        "long_conversation_with_tools_and_reasoning",
        "tools_with_system",
        "unicode_and_emoji",
    ] {
        let (request, vllm_ids) = fixture(name);
        let (st, worker, body) = chat(&f, &request).await;
        assert_eq!(st, 200, "{name}: {body}");
        let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
        let hashes = pipeline.block_hashes(&vllm_ids, None, None);
        let l = f.store.probe(MODEL, &hashes).await.unwrap();
        let held = l
            .workers
            .iter()
            .find(|w| w.info.worker_id == worker)
            .unwrap()
            .matched_blocks;
        assert_eq!(
            held,
            vllm_ids.len() / 16,
            "{name}: claimed blocks differ from vLLM's"
        );
        assert!(wait_no_in_flight(&f.store).await);
    }
}

#[tokio::test]
async fn the_next_turn_of_a_conversation_follows_its_prefix() {
    let f = fleet(3).await;
    let system = "You are a meticulous assistant. ".repeat(40);
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "Hello there"}),
    ];
    let (_, first, _) = chat(&f, &json!({"model": MODEL, "messages": messages})).await;
    // A request still counted in flight would rightly push the next away.
    assert!(wait_no_in_flight(&f.store).await);
    for turn in 0..3 {
        messages.push(json!({"role": "assistant", "content": format!("Answer {turn}")}));
        messages.push(json!({"role": "user", "content": format!("Follow-up {turn}")}));
        let (st, w, body) = chat(&f, &json!({"model": MODEL, "messages": messages})).await;
        assert_eq!((st, w.as_str()), (200, first.as_str()), "{body}");
        assert!(wait_no_in_flight(&f.store).await);
    }
}

#[tokio::test]
async fn chat_the_router_cannot_reproduce_is_routed_by_load_and_invalid_chat_is_refused() {
    let f = fleet(1).await;
    let image = json!({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]});
    let (st, _, body) = chat(&f, &image).await;
    assert_eq!(st, 200, "{body}");
    let metrics = http()
        .get(f.router.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("prefix_router_chat_render_unsupported_total"),
        "not reported"
    );
    let object_arguments = json!({"model": MODEL, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]});
    let (st, _, body) = chat(&f, &object_arguments).await;
    assert_eq!(st, 400, "{body}");
    assert_eq!(
        f.workers[0].hits(),
        1,
        "the invalid request reached a worker"
    );
}
