//! The models a router hashes prompts for: each one's settings
//! ([`ModelConfig`], which `config` resolves from the flags and the file),
//! its tokenizer files (from a directory, or by Hugging Face id from the
//! hub's cache or the hub: `hub`), and the tokenizers loaded into the
//! per-model pipelines ([`pipelines`]).

pub mod hub;

use std::path::PathBuf;

use anyhow::Context;
use protocol::hashing::HashSeed;
use tokenize::{ModelPipeline, ModelPipelines};

/// One base model with its own tokenizer and engine settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The `model` requests and workers name.
    pub name: String,
    /// Its `tokenizer.json` and `tokenizer_config.json`.
    pub tokenizer_dir: PathBuf,
    /// Its engines' `--block-size`.
    pub block_size: usize,
    /// Its engines' `PYTHONHASHSEED`, if set.
    pub hash_seed: Option<String>,
    /// LoRA adapters its engines serve: (name, path).
    pub loras: Vec<(String, String)>,
}

/// Every model's pipeline (tokenizer, block size, seed) and LoRA adapters.
pub fn pipelines(models: &[ModelConfig]) -> anyhow::Result<ModelPipelines> {
    let mut pipelines = ModelPipelines::default();
    for m in models {
        let seed = HashSeed::from_env_value(m.hash_seed.clone());
        let pipeline =
            ModelPipeline::load(&m.tokenizer_dir, m.block_size, &seed).with_context(|| {
                format!(
                    "loading the tokenizer of {} from {}",
                    m.name,
                    m.tokenizer_dir.display()
                )
            })?;
        pipelines.insert(&m.name, pipeline);
        for (name, path) in &m.loras {
            pipelines.insert_adapter(name, path, &m.name);
        }
    }
    Ok(pipelines)
}
