//! Tokenization exactly as the engine does it: the model's own
//! `tokenizer.json`, and a cache that makes long repeated prefixes cheap.

pub mod chat;
mod chunk_cache;
mod model_tokenizer;

pub use chat::{ChatError, ChatRenderer, ChatRendererOptions, ChatRequest, RenderedPrompt};
pub use chunk_cache::{ChunkCache, split_at_safe_boundaries};
pub use model_tokenizer::{ModelTokenizer, TokenizeError, TokenizerConfig};
