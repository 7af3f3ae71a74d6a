//! The worker crate's tests: the KV-event transport against vLLM's own
//! recordings and over real ZeroMQ (`kv_events`), the reporter's block
//! bookkeeping on recorded and synthetic events (`real_vllm_frames`,
//! `reporter_hashes`, `reporter_tiers`) and its session (`reporter_session`).
//! One test binary, one module per concern; run one with `cargo test -p
//! worker --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod kv_events;
mod real_vllm_frames;
mod reporter_hashes;
mod reporter_session;
mod reporter_tiers;
