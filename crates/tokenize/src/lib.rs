//! Prompts to token ids exactly as the engine makes them, and from there to
//! the engine's block hashes: the model's own `tokenizer.json`, vLLM's chat
//! rendering, and a cache that makes long repeated prefixes cheap.
//!
//! Layout (depends on `protocol` for the block hasher, `tokenizer-json`
//! for reading a `tokenizer.json`):
//!
//! * `model_tokenizer`: [`ModelTokenizer`], `tokenizer.json` plus the
//!   special-token rules of `tokenizer_config.json`.
//! * `tokenizer_file`: a loaded `tokenizer.json` and what it says about
//!   tokens, shared within the process by the tokenizers that read the
//!   same file while one of them is in use; [`load_tokenizer`], a
//!   `tokenizer.json` read by the `tokenizer-json` crate into the
//!   tokenizer `tokenizers` would build (one typed pass, checked, else
//!   `tokenizers`' own load).
//! * `chunk_cache`: [`ChunkCache`], token ids of text chunks already seen.
//! * `long_tokens`: the vocabulary's long tokens, for a lower bound on a
//!   text's tokens from its length without tokenizing it.
//! * `context`: [`context_length`], a model's context length from its
//!   `config.json` and `tokenizer_config.json`.
//! * [`chat`]: chat requests rendered as vLLM's OpenAI server does (message
//!   normalization, the model's Jinja template, Python-exact filters).
//! * `prompt`: [`PromptField`], [`completion_prompt`] and
//!   [`prompt_from_json`], the prompt of a completions body.
//! * `token_ids`: [`read_token_ids`], a JSON list of token ids read from
//!   its bytes (a prompt's; the ids vLLM streams back, for migration), and
//!   [`read_token_ids_prefix`], one at the start of a longer text.
//! * `pipeline`: [`ModelPipeline`], one model's tokenizer, chat renderer and
//!   block hasher; [`ModelPipelines`], all of a router's models.
//!
//! Within: `pipeline` → `chat`, `context`, `model_tokenizer` →
//! `chunk_cache`, `tokenizer_file` → `long_tokens`; `prompt` →
//! `token_ids`.

pub mod chat;
mod chunk_cache;
mod context;
mod long_tokens;
mod model_tokenizer;
mod pipeline;
mod prompt;
mod token_ids;
mod tokenizer_file;

pub use chat::{ChatError, ChatRenderer, ChatRendererOptions, ChatRequest, RenderedPrompt};
pub use chunk_cache::{ChunkCache, MAX_PIECE_BYTES, split_at_safe_boundaries, split_long};
pub use context::context_length;
pub use model_tokenizer::{ModelTokenizer, TokenizeError, TokenizerConfig};
pub use pipeline::{ModelPipeline, ModelPipelines, Resolved};
pub use prompt::{
    CompletionPrompt, InvalidPrompt, PromptField, cache_salt, completion_prompt, prompt_from_json,
};
pub use token_ids::{read_token_ids, read_token_ids_prefix};
pub use tokenizer_file::load_tokenizer;
pub use tokenizer_json::LoadedTokenizer;
