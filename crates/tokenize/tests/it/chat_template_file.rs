//! A chat template kept apart (`chat_template.jinja`, as recent Hugging
//! Face repositories ship it) renders chats as the same template inside
//! `tokenizer_config.json` does, and wins over it when both are present.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::path::{Path, PathBuf};

use tokenize::{ChatRenderer, ModelTokenizer};

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3")
}

const BODY: &[u8] = br#"{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}]}"#;

fn render(dir: &Path) -> Vec<u32> {
    let tok = ModelTokenizer::from_dir(dir, 0).unwrap();
    ChatRenderer::new(tok)
        .unwrap()
        .render_json(BODY)
        .unwrap()
        .token_ids
}

#[test]
fn a_separate_chat_template_file_renders_as_the_configs() {
    let want = render(&shared());
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(shared().join("tokenizer_config.json")).unwrap())
            .unwrap();
    let template = cfg["chat_template"].as_str().unwrap().to_owned();

    // The template only in chat_template.jinja.
    let apart = tempfile::tempdir().unwrap();
    std::fs::copy(
        shared().join("tokenizer.json"),
        apart.path().join("tokenizer.json"),
    )
    .unwrap();
    let mut without = cfg.clone();
    without.as_object_mut().unwrap().remove("chat_template");
    std::fs::write(
        apart.path().join("tokenizer_config.json"),
        serde_json::to_vec(&without).unwrap(),
    )
    .unwrap();
    let no_template = ModelTokenizer::from_dir(apart.path(), 0)
        .ok()
        .and_then(|t| ChatRenderer::new(t).ok())
        .and_then(|r| r.render_json(BODY).ok())
        .map(|p| p.token_ids);
    assert_ne!(
        no_template,
        Some(want.clone()),
        "rendered without the template"
    );
    std::fs::write(apart.path().join("chat_template.jinja"), &template).unwrap();
    assert_eq!(render(apart.path()), want);

    // Both present: the file wins (here, a template that drops the system
    // prompt gives other ids).
    let mut broken = cfg.clone();
    broken["chat_template"] = serde_json::json!("{{ messages[-1]['content'] }}");
    std::fs::write(
        apart.path().join("tokenizer_config.json"),
        serde_json::to_vec(&broken).unwrap(),
    )
    .unwrap();
    assert_eq!(render(apart.path()), want);
}
