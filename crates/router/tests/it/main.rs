//! The router's tests through its public surface (`prefix_router`, the
//! `prefix-router` binary) with real valkey-servers, real HTTP on
//! loopback, fake or simulated workers. One test binary (each test binary
//! links the whole router): one module per concern; run one with
//! `cargo test -p prefix-router --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod support;
// Envoy's side of ext_proc, for `epp`, `epp_pd` and `otlp`.
#[allow(dead_code)] // each user takes a part
mod envoy;
// The picker's test fleet, for `epp`, `epp_limits` and `epp_flow`.
#[allow(dead_code)] // each user takes a part
mod epp_fleet;

mod api_input;
mod api_lifecycle;
mod config;
mod config_epp;
mod connections;
mod drain;
mod epp;
mod epp_flow;
mod epp_limits;
mod epp_pd;
mod flow_control;
mod forward_paths;
mod fuzz_api;
mod hub_models;
mod inflight_reconcile;
mod inspect;
mod lmcache;
mod load_bounds;
mod load_scrape;
mod migration;
mod migration_whole;
mod models_lifecycle;
mod multi_model;
mod otlp;
mod pd_picks;
mod pd_routing;
mod pd_sims;
mod prefill_count;
mod probes;
mod proxy;
mod push;
mod push_events;
mod response_cache;
mod restart;
mod route_script;
mod router_only_fields;
mod security;
mod serving_threads;
mod sync_abort;
mod tenant_limits;
mod tenant_limits_epp;
mod tokenize_limits;
mod valkey_auth_tls;
mod worker_urls;
mod write_outage;
