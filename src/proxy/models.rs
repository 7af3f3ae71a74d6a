//! [`ModelPipelines`]: per model, how prompts become the engine's block hashes.

use std::collections::HashMap;
use std::path::Path;

use crate::hashing::{BlockHash, BlockHasher, ExtraKeys, HashSeed};
use crate::tokenize::{ModelTokenizer, TokenizeError};

/// Tokens cached per model by the chunk cache.
const CACHE_TOKENS: usize = 4 << 20;

/// One model's tokenizer and block hasher (block size and seed of its engine).
#[derive(Clone)]
pub struct ModelPipeline {
    /// The model's own tokenizer.
    pub tokenizer: ModelTokenizer,
    /// vLLM's chained block hasher, as the engine is configured.
    pub hasher: BlockHasher,
}

impl ModelPipeline {
    /// Loads the tokenizer from `dir`; `block_size` and `seed` must match the
    /// engine's `--block-size` and `PYTHONHASHSEED`.
    pub fn load(dir: &Path, block_size: usize, seed: &HashSeed) -> Result<Self, TokenizeError> {
        let tokenizer = ModelTokenizer::from_dir(dir, CACHE_TOKENS)?;
        let hasher = BlockHasher::new(block_size, seed)
            .map_err(|e| TokenizeError::Tokenizer(e.to_string()))?;
        Ok(ModelPipeline { tokenizer, hasher })
    }

    /// The block hashes of a prompt's full blocks.
    pub fn block_hashes(&self, tokens: &[u32], cache_salt: Option<String>) -> Vec<BlockHash> {
        let keys = ExtraKeys {
            cache_salt,
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
}

impl ModelPipelines {
    /// Adds `model`'s pipeline.
    pub fn insert(&mut self, model: &str, pipeline: ModelPipeline) {
        self.by_model.insert(model.to_owned(), pipeline);
    }

    /// The pipeline of `model`, if configured.
    pub fn get(&self, model: &str) -> Option<&ModelPipeline> {
        self.by_model.get(model)
    }
}
