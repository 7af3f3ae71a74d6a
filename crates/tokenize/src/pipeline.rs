//! [`ModelPipelines`]: per model, how prompts become the engine's block hashes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use protocol::hashing::{BlockHash, BlockHasher, ExtraKeys, HashSeed, LoraKey};

use crate::{ChatRenderer, ModelTokenizer, TokenizeError};

/// Tokens cached per model by the chunk cache.
const CACHE_TOKENS: usize = 4 << 20;

/// One model's tokenizer and block hasher (block size and seed of its engine).
#[derive(Clone)]
pub struct ModelPipeline {
    /// The model's own tokenizer.
    pub tokenizer: ModelTokenizer,
    /// vLLM's chained block hasher, as the engine is configured.
    pub hasher: BlockHasher,
    /// Chat requests to prompt ids, as vLLM's OpenAI server renders them;
    /// `None` when the model's chat template cannot be reproduced exactly.
    pub chat: Option<Arc<ChatRenderer>>,
    /// The model's context length from its files ([`crate::context_length`]).
    pub context_len: Option<u64>,
}

impl ModelPipeline {
    /// Loads the tokenizer from `dir`; `block_size` and `seed` must match the
    /// engine's `--block-size` and `PYTHONHASHSEED`.
    pub fn load(dir: &Path, block_size: usize, seed: &HashSeed) -> Result<Self, TokenizeError> {
        let tokenizer = ModelTokenizer::from_dir(dir, CACHE_TOKENS)?;
        let hasher = BlockHasher::new(block_size, seed)
            .map_err(|e| TokenizeError::Tokenizer(e.to_string()))?;
        let chat = match ChatRenderer::new(tokenizer.clone()) {
            Ok(r) => Some(Arc::new(r)),
            Err(e) => {
                tracing::warn!(error = %e, dir = %dir.display(), "chat requests will be routed without prefix locality");
                None
            }
        };
        Ok(ModelPipeline {
            tokenizer,
            hasher,
            chat,
            context_len: crate::context_length(dir),
        })
    }

    /// The block hashes of a prompt's full blocks, with the LoRA adapter
    /// and cache salt mixed in as the engine does.
    pub fn block_hashes(
        &self,
        tokens: &[u32],
        cache_salt: Option<String>,
        lora: Option<LoraKey>,
    ) -> Vec<BlockHash> {
        let keys = ExtraKeys {
            cache_salt,
            lora,
            ..ExtraKeys::default()
        };
        self.hasher.block_hashes(tokens, &keys)
    }
}

/// The pipelines of the models this router can hash for. A model without one
/// is still routed (by load), but without prefix locality.
#[derive(Clone, Default)]
pub struct ModelPipelines {
    by_model: HashMap<String, ModelPipeline>,
    /// LoRA adapter name → (base model, the adapter's hash key).
    adapters: HashMap<String, (String, LoraKey)>,
}

/// Where a request's `model` leads: the workers' model and how to hash.
pub struct Resolved<'a> {
    /// The model whose workers serve the request (the base of an adapter).
    pub route_model: &'a str,
    /// Its pipeline, if configured.
    pub pipeline: Option<&'a ModelPipeline>,
    /// The adapter's extra hash key, for LoRA requests.
    pub lora: Option<LoraKey>,
}

impl ModelPipelines {
    /// Adds `model`'s pipeline.
    pub fn insert(&mut self, model: &str, pipeline: ModelPipeline) {
        self.by_model.insert(model.to_owned(), pipeline);
    }

    /// Serves LoRA adapter `name` (loaded from `path` on the engines) on the
    /// workers of `base`.
    pub fn insert_adapter(&mut self, name: &str, path: &str, base: &str) {
        let key = LoraKey::new(name, path);
        self.adapters
            .insert(name.to_owned(), (base.to_owned(), key));
    }

    /// The pipeline of `model`, if configured.
    pub fn get(&self, model: &str) -> Option<&ModelPipeline> {
        self.by_model.get(model)
    }

    /// What a request for `model` is routed on and hashed with.
    pub fn resolve<'a>(&'a self, model: &'a str) -> Resolved<'a> {
        match self.adapters.get(model) {
            Some((base, key)) => Resolved {
                route_model: base,
                pipeline: self.by_model.get(base),
                lora: Some(key.clone()),
            },
            None => Resolved {
                route_model: model,
                pipeline: self.by_model.get(model),
                lora: None,
            },
        }
    }
}
