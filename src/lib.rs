//! prefix-router: stateless, cache-aware routers for LLM inference that share
//! one prefix index in Valkey.
//!
//! Layers, with one-way dependencies: [`api`] (HTTP, thin) → [`state`]
//! (Valkey store and its Lua scripts) and [`hashing`] (pure).

pub mod api;
pub mod config;
pub mod hashing;
pub mod inspect;
pub mod kv_events;
pub mod load_scrape;
pub mod proxy;
pub mod push;
pub mod reporter;
pub mod routing;
pub mod serve;
pub mod sim;
pub mod state;
pub mod tokenize;
