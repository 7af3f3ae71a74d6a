//! The load test's own tests on tiny fleets of real processes (Valkey,
//! routers, sims): a run end to end (`smoke`), P/D arms (`pd_smoke`), the
//! capacity ramp (`ramp`), the Dynamo frontend protocol
//! (`dynamo_frontend`) and the fault-free twin check (`twins`). One test
//! binary, one module per concern; run one with
//! `cargo test -p loadtest --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod common;

mod dynamo_frontend;
mod pd_smoke;
mod ramp;
mod smoke;
mod twins;
