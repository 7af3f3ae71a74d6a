//! The load test's own tests on tiny fleets of real processes (Valkey,
//! routers, sims): a run end to end (`smoke`), P/D arms (`pd_smoke`), the
//! capacity ramp (`ramp`) and the Dynamo frontend protocol
//! (`dynamo_frontend`). One test binary, one module per concern; run one
//! with `cargo test -p loadtest --test it <module>::`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod common;

mod dynamo_frontend;
mod pd_smoke;
mod ramp;
mod smoke;
