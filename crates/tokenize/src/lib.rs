//! Prompts to token ids exactly as the engine makes them, and from there to
//! the engine's block hashes: the model's own `tokenizer.json`, vLLM's chat
//! rendering, and a cache that makes long repeated prefixes cheap.
//!
//! Layout (depends on `protocol` for the block hasher):
//!
//! * `model_tokenizer`: [`ModelTokenizer`], `tokenizer.json` plus the
//!   special-token rules of `tokenizer_config.json`.
//! * `chunk_cache`: [`ChunkCache`], token ids of text chunks already seen.
//! * [`chat`]: chat requests rendered as vLLM's OpenAI server does (message
//!   normalization, the model's Jinja template, Python-exact filters).
//! * `prompt`: [`PromptField`] and [`completion_prompt`], the prompt of a
//!   completions body.
//! * `pipeline`: [`ModelPipeline`], one model's tokenizer, chat renderer and
//!   block hasher; [`ModelPipelines`], all of a router's models.
//!
//! Within: `pipeline` → `chat`, `model_tokenizer` → `chunk_cache`.

pub mod chat;
mod chunk_cache;
mod model_tokenizer;
mod pipeline;
mod prompt;

pub use chat::{ChatError, ChatRenderer, ChatRendererOptions, ChatRequest, RenderedPrompt};
pub use chunk_cache::{ChunkCache, MAX_PIECE_BYTES, split_at_safe_boundaries, split_long};
pub use model_tokenizer::{ModelTokenizer, TokenizeError, TokenizerConfig};
pub use pipeline::{ModelPipeline, ModelPipelines, Resolved};
pub use prompt::{CompletionPrompt, InvalidPrompt, PromptField, cache_salt, completion_prompt};
