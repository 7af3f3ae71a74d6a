//! Several base models per router (`[[models]]` in the TOML file), each with
//! its own tokenizer, block size and seed: a real router and valkey-server,
//! fake workers over HTTP, the real Qwen3 tokenizer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::io::Write;
use std::path::Path;

use prefix_router::WORKER_HEADER;
use prefix_router::{ServeArgs, ServeConfig};
use protocol::hashing::{HashSeed, LoraKey};
use serde_json::{Value, json};
use state::{StateStore, StateTtls, WorkerHeartbeat};
use support::fake_worker::FakeWorker;
use support::{Router, Valkey, args, http, post, store, tokenizer_dir};
use tokenize::ModelPipeline;

fn toml_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// Two models on the same tokenizer, told apart by block size and seed.
fn two_models(dir: &Path) -> String {
    format!(
        r#"
[[models]]
name = "qwen-a"
tokenizer_dir = "{dir}"

[[models]]
name = "qwen-b"
tokenizer_dir = "{dir}"
block_size = 32
hash_seed = "7"
loras = ["b-lora=/adapters/b-lora"]
"#,
        dir = dir.display()
    )
}

async fn register(store: &StateStore, model: &str, w: &FakeWorker) {
    let hb = WorkerHeartbeat {
        worker_id: w.name().into(),
        url: w.url(),
        load: None,
    };
    store.heartbeat(model, &hb).await.unwrap();
}

async fn send(r: &Router, path: &str, body: &Value) -> (u16, String, Value) {
    let resp = http().post(r.url(path)).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let worker = resp
        .headers()
        .get(WORKER_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, worker, resp.json().await.unwrap_or(Value::Null))
}

fn prompt(topic: &str) -> String {
    format!(
        "You are an expert on {topic}.\n{}Question?",
        "Here is a long shared document line.\n".repeat(40)
    )
}

#[tokio::test]
async fn each_model_goes_to_its_workers_with_its_own_hashes() {
    let valkey = Valkey::start();
    let file = toml_file(&two_models(&tokenizer_dir()));
    let mut a = args();
    a.config = Some(file.path().to_owned());
    let router = Router::start(&valkey.url(), a).await;
    // The stub workers never heartbeat: their leases must outlast the test
    // (it took 17 s on a loaded machine, past the default lease).
    let ttls = StateTtls {
        worker_lease: std::time::Duration::from_secs(120),
        ..StateTtls::default()
    };
    let probe = store(&valkey, "pr", "test-probe", ttls);
    let wa = FakeWorker::start("wa").await;
    let wb = FakeWorker::start("wb").await;
    register(&probe, "qwen-a", &wa).await;
    register(&probe, "qwen-b", &wb).await;

    let hex = |hashes: &[protocol::hashing::BlockHash]| -> Vec<Value> {
        hashes.iter().map(|h| json!(h.to_hex())).collect()
    };
    let engines = [
        ("qwen-a", "wa", 16, HashSeed::Default),
        ("qwen-b", "wb", 32, HashSeed::PythonHashSeed("7".into())),
    ];
    for (model, worker, block_size, seed) in engines {
        let text = prompt(model);
        let body = json!({"model": model, "prompt": text});
        let (st, served, answer) = send(&router, "/v1/completions", &body).await;
        assert_eq!((st, served.as_str()), (200, worker), "{model}: {answer}");
        assert_eq!(answer["echo"]["model"], model);

        // The router's hashes are the engine's: this model's block size and seed.
        let pipeline = ModelPipeline::load(&tokenizer_dir(), block_size, &seed).unwrap();
        let ids = pipeline.tokenizer.encode_plain(&text, true).unwrap();
        let hashes = pipeline.block_hashes(&ids, None, None);
        assert_eq!(hashes.len(), ids.len() / block_size);
        let (st, explained) = post(&router, "/admin/explain", &body).await;
        assert_eq!(st, 200, "{explained}");
        assert_eq!(explained["block_size"], block_size, "{model}");
        assert_eq!(explained["prompt_tokens"], ids.len());
        assert_eq!(
            explained["block_hashes"],
            Value::Array(hex(&hashes)),
            "{model}"
        );
        assert_eq!(explained["chosen"]["worker_id"], worker);
        // …and what it claimed for the worker.
        let l = probe.probe(model, &hashes).await.unwrap();
        assert_eq!(l.workers.len(), 1, "{model} has its own workers only");
        assert_eq!(l.workers[0].matched_blocks, hashes.len(), "{model}");
    }

    // Chat requests render with the model's own template, same routing.
    let chat = json!({"model": "qwen-b", "messages": [{"role": "user", "content": "hi"}]});
    let (st, served, _) = send(&router, "/v1/chat/completions", &chat).await;
    assert_eq!((st, served.as_str()), (200, "wb"));

    // A LoRA adapter of qwen-b: qwen-b's workers, hashed with the adapter.
    let text = prompt("adapters");
    let body = json!({"model": "b-lora", "prompt": text});
    let (st, served, answer) = send(&router, "/v1/completions", &body).await;
    assert_eq!((st, served.as_str()), (200, "wb"), "{answer}");
    let (_, explained) = post(&router, "/admin/explain", &body).await;
    let pipeline =
        ModelPipeline::load(&tokenizer_dir(), 32, &HashSeed::PythonHashSeed("7".into())).unwrap();
    let ids = pipeline.tokenizer.encode_plain(&text, true).unwrap();
    let lora = LoraKey::new("b-lora", "/adapters/b-lora");
    let hashes = pipeline.block_hashes(&ids, None, Some(lora));
    assert_eq!(explained["block_hashes"], Value::Array(hex(&hashes)));

    // A model nobody serves is the usual 404.
    let (st, _, answer) = send(
        &router,
        "/v1/completions",
        &json!({"model": "nope", "prompt": "hi"}),
    )
    .await;
    assert_eq!(st, 404, "{answer}");
    assert_eq!(answer["error"]["type"], "model_not_found", "{answer}");
    router.stop().await;
}

fn resolve_file(text: &str, mut a: ServeArgs) -> anyhow::Result<ServeConfig> {
    let file = toml_file(text);
    a.config = Some(file.path().to_owned());
    a.internal_token = Some("t".into());
    ServeConfig::resolve(a)
}

fn error_of(text: &str, a: ServeArgs) -> String {
    format!("{:#}", resolve_file(text, a).unwrap_err())
}

#[test]
fn models_inherit_the_top_level_settings_and_follow_the_single_model() {
    let dir = tokenizer_dir();
    let text = format!("block_size = 64\nhash_seed = \"1\"\n{}", two_models(&dir));
    let mut a = args();
    a.model = Some("single".into());
    a.tokenizer_dir = Some(dir.clone());
    a.loras = vec!["s-lora=/adapters/s".into()];
    let cfg = resolve_file(&text, a).unwrap();
    let summary: Vec<_> = cfg
        .models
        .iter()
        .map(|m| {
            (
                m.name.as_str(),
                m.block_size,
                m.hash_seed.as_deref(),
                m.loras.len(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("single", 64, Some("1"), 1),
            ("qwen-a", 64, Some("1"), 0),
            ("qwen-b", 32, Some("7"), 1),
        ]
    );
    // `--model` without `--tokenizer-dir` names the static workers' model
    // only; its pipeline may come from [[models]].
    let mut a = args();
    a.model = Some("qwen-a".into());
    let cfg = resolve_file(&two_models(&dir), a).unwrap();
    assert_eq!(cfg.models.len(), 2);
    // The single model alone still works, as one entry.
    let mut a = args();
    a.model = Some("only".into());
    a.tokenizer_dir = Some(dir.clone());
    let cfg = resolve_file("", a).unwrap();
    assert_eq!(cfg.models.len(), 1);
    assert_eq!(
        (cfg.models[0].name.as_str(), cfg.models[0].block_size),
        ("only", 16)
    );
}

#[test]
fn bad_model_tables_are_clear_startup_errors() {
    let dir = tokenizer_dir();
    let entry = |name: &str, extra: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\ntokenizer_dir = \"{}\"\n{extra}\n",
            dir.display()
        )
    };
    let twice = format!("{}{}", entry("m", ""), entry("m", ""));
    assert!(error_of(&twice, args()).contains("\"m\" is configured twice"));

    let mut a = args();
    a.model = Some("m".into());
    a.tokenizer_dir = Some(dir.clone());
    assert!(error_of(&entry("m", ""), a).contains("configured twice"));

    let missing = "[[models]]\nname = \"m\"\ntokenizer_dir = \"/nonexistent/tok\"\n";
    let e = error_of(missing, args());
    assert!(
        e.contains("/nonexistent/tok") && e.contains("not a directory"),
        "{e}"
    );

    let empty = tempfile::tempdir().unwrap();
    let no_json = format!(
        "[[models]]\nname = \"m\"\ntokenizer_dir = \"{}\"\n",
        empty.path().display()
    );
    assert!(error_of(&no_json, args()).contains("has no tokenizer.json"));

    let e = error_of(&entry("m", "block_sise = 32"), args());
    assert!(e.contains("block_sise"), "unknown keys are errors: {e}");
    let e = error_of(&entry("m", "block_size = 0"), args());
    assert!(e.contains("block_size must be positive"), "{e}");
    let e = error_of(&entry("m", "loras = [\"nopath\"]"), args());
    assert!(e.contains("NAME=PATH"), "{e}");
    let clash = format!("{}{}", entry("m", ""), entry("n", "loras = [\"m=/a\"]"));
    assert!(error_of(&clash, args()).contains("reuses a model or adapter name"));
    let e = error_of("[[models]]\nname = \"m\"\n", args());
    assert!(
        e.contains("tokenizer_dir"),
        "tokenizer_dir is required: {e}"
    );
    let e = error_of(&entry("bad name", ""), args());
    assert!(e.contains("bad name"), "{e}");

    // Adapters need a model to belong to.
    let mut a = args();
    a.model = Some("m".into());
    a.loras = vec!["x=/y".into()];
    assert!(error_of("", a).contains("--lora needs --model and --tokenizer-dir"));
}
