//! The tokenizer's tests against the real Qwen3 tokenizer of `../shared`:
//! chat rendering as vLLM's server renders it (`chat_fixtures`,
//! `chat_template_file`), chunked tokenizing (`tokenize_chunks`) and the
//! fast `tokenizer.json` load against `tokenizers`' own (`tokenizer_load`).
//! One test binary, one module per concern; run one with `cargo test -p
//! tokenize --test it <module>::`. `tokenize_memory` is a binary of its own:
//! it installs a counting global allocator.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod chat_fixtures;
mod chat_template_file;
mod tokenize_chunks;
mod tokenizer_load;
