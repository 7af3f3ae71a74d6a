//! `system-tests`: no code, only tests (`tests/it/`): whole fleets of
//! processes (routers, sims, reporters, HAProxy, Valkey), the fault
//! scenarios, `scripts/fleet.sh`, the deployment files and the dashboards.
//! They sit above every other crate of the workspace and run its binaries
//! (`cargo test --workspace` builds them; alone, `cargo build --bins`
//! first). Not published.
