//! Where requests go: a shared prefix to its holder, LoRA requests to
//! the base model's workers, token-id prompts on their blocks, a dead worker
//! replaced before the first byte, load read from vLLM's ORCA header, and
//! `explain` without changing state.

use super::*;

#[tokio::test]
async fn a_request_sharing_a_prefix_goes_where_the_prefix_is() {
    let f = fleet(3).await;
    let doc = long_prompt("routers");
    let (st, first, _) = complete(
        &f,
        json!({"model": MODEL, "prompt": format!("{doc}Question A?")}),
    )
    .await;
    assert_eq!(st, 200);
    assert!(wait_no_in_flight(&f.store).await);
    // The blocks the router claimed are exactly the engine's hashes of the prompt.
    let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
    let ids = pipeline
        .tokenizer
        .encode_plain(&format!("{doc}Question A?"), true)
        .unwrap();
    let hashes = pipeline.block_hashes(&ids, None, None);
    let l = f.store.probe(MODEL, &hashes).await.unwrap();
    let holder = l
        .workers
        .iter()
        .find(|w| w.info.worker_id == first)
        .unwrap();
    assert_eq!(
        holder.matched_blocks,
        ids.len() / 16,
        "claimed blocks differ from the engine's"
    );
    for i in 0..5 {
        let (st, w, body) = complete(
            &f,
            json!({"model": MODEL, "prompt": format!("{doc}Question {i}?")}),
        )
        .await;
        assert_eq!((st, w.as_str()), (200, first.as_str()), "{body}");
        assert!(wait_no_in_flight(&f.store).await);
    }
    // The body reaches the worker unchanged.
    let w = f.workers.iter().find(|w| w.name() == first).unwrap();
    assert_eq!(
        w.shared.bodies.lock().unwrap().last().unwrap()["prompt"],
        format!("{doc}Question 4?")
    );
}

#[tokio::test]
async fn lora_requests_go_to_the_base_models_workers_under_lora_hashes() {
    let f = fleet(2).await;
    let prompt = long_prompt("sql");
    let (st, worker, body) = complete(&f, json!({"model": "sql-lora", "prompt": prompt})).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        body["echo"]["model"], "sql-lora",
        "the body must reach the worker unchanged"
    );
    let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
    let ids = pipeline.tokenizer.encode_plain(&prompt, true).unwrap();
    let lora = LoraKey::new("sql-lora", "/adapters/sql-lora");
    let with_lora = pipeline.block_hashes(&ids, None, Some(lora));
    let base = pipeline.block_hashes(&ids, None, None);
    assert_ne!(with_lora[0], base[0]);
    let held = |hashes: Vec<_>| {
        let store = f.store.clone();
        let worker = worker.clone();
        async move {
            let l = store.probe(MODEL, &hashes).await.unwrap();
            l.workers
                .iter()
                .find(|w| w.info.worker_id == worker)
                .unwrap()
                .matched_blocks
        }
    };
    assert_eq!(held(with_lora).await, ids.len() / 16);
    assert_eq!(
        held(base).await,
        0,
        "a LoRA request must not claim the base model's blocks"
    );
}

#[tokio::test]
async fn token_id_prompts_are_routed_on_their_blocks() {
    let f = fleet(2).await;
    let ids: Vec<u32> = (1000..1400).collect();
    let (_, first, _) = complete(&f, json!({"model": MODEL, "prompt": ids})).await;
    assert!(wait_no_in_flight(&f.store).await);
    let mut longer = ids.clone();
    longer.extend(5000..5100);
    let (st, again, _) = complete(&f, json!({"model": MODEL, "prompt": [longer]})).await;
    assert_eq!((st, again), (200, first));
}

#[tokio::test]
async fn a_dead_worker_is_replaced_by_the_next_best_before_the_first_byte() {
    let f = fleet(1).await;
    // "dead" holds the prefix, so it ranks first, but nothing listens there.
    let dead = format!("http://127.0.0.1:{}", support::free_port().unwrap());
    register(&f.store, "dead", &dead).await;
    let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
    let prompt = long_prompt("retries");
    let ids = pipeline.tokenizer.encode_plain(&prompt, true).unwrap();
    f.store
        .stored(MODEL, "dead", &pipeline.block_hashes(&ids, None, None))
        .await
        .unwrap();
    let (st, worker, body) = complete(&f, json!({"model": MODEL, "prompt": prompt})).await;
    assert_eq!((st, worker.as_str()), (200, "w0"), "{body}");
    assert!(
        wait_no_in_flight(&f.store).await,
        "the failed attempt's in-flight count leaked"
    );
}

#[tokio::test]
async fn explain_shows_the_decision_without_changing_state() {
    let f = fleet(3).await;
    let doc = long_prompt("explanations");
    let (_, holder, _) = complete(&f, json!({"model": MODEL, "prompt": format!("{doc}Q1")})).await;
    assert!(wait_no_in_flight(&f.store).await);
    let before = support::raw_state(&f.valkey, "pr", MODEL);
    let prompt = format!("{doc}Q2");
    let resp = http()
        .post(f.router.url("/admin/explain"))
        .bearer_auth(support::TOKEN)
        .json(&json!({"model": MODEL, "prompt": prompt}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(
        support::raw_state(&f.valkey, "pr", MODEL),
        before,
        "explain changed the state"
    );
    assert_eq!(e["chosen"]["worker_id"], holder.as_str(), "{e}");
    assert!(
        e["chosen"]["reason"].as_str().unwrap().starts_with("hit"),
        "{e}"
    );
    assert_eq!(e["candidates"].as_array().unwrap().len(), 3);
    let pipeline = ModelPipeline::load(&tokenizer_dir(), 16, &HashSeed::Default).unwrap();
    let ids = pipeline.tokenizer.encode_plain(&prompt, true).unwrap();
    let want: Vec<String> = pipeline
        .block_hashes(&ids, None, None)
        .iter()
        .map(|h| h.to_hex())
        .collect();
    assert_eq!(e["block_hashes"], json!(want));
    assert_eq!(e["prompt_tokens"], ids.len());
    let metrics = http()
        .get(f.router.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "prefix_router_decisions_total",
        "prefix_router_route_phase_seconds",
        "prefix_router_upstream_responses_total",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
}

#[tokio::test]
async fn worker_load_is_read_from_vllms_orca_header() {
    let f = fleet(1).await;
    f.workers[0].shared.orca_waiting.store(3, Ordering::SeqCst);
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .json(&json!({"model": MODEL, "prompt": "load report please"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers().get("endpoint-load-metrics").is_none(),
        "the router's own ORCA request leaked to the client"
    );
    let mut seen = None;
    for _ in 0..50 {
        let l = f.store.probe(MODEL, &[]).await.unwrap();
        let load = l.workers[0].info.load;
        if load.num_requests_waiting == 3 {
            seen = Some(load);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let load = seen.expect("ORCA load not recorded");
    assert!((load.kv_cache_usage_perc - 0.4).abs() < 1e-9);
    // A client that asks for the header itself gets it.
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .header("endpoint-load-metrics-format", "TEXT")
        .json(&json!({"model": MODEL, "prompt": "mine"}))
        .send()
        .await
        .unwrap();
    assert!(resp.headers().get("endpoint-load-metrics").is_some());
}
