//! The state suite: `StateStore` and its Lua library against real
//! valkey-servers (started through `fleet`; `$VALKEY_SERVER` picks the
//! program, so `scripts/test.sh` runs this suite again on Redis 7). One
//! test binary, one module per concern; run one with
//! `cargo test -p state --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod support;

mod drain;
mod events;
mod expiry;
mod flow_store;
mod response_cache_store;
mod route;
mod route_helpers;
mod serving_threads;
mod shards;
mod state_model;
mod sync;
mod tenant_limits_store;
mod tier_state;
