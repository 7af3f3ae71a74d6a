//! `scripts/fleet.sh` end to end: `up` starts valkey-server, two routers,
//! HAProxy (from `deploy/haproxy.cfg`) and three sim-workers on loopback;
//! completions sent to the balancer are answered and routed; a killed
//! router is routed around; `status` tells; `down` leaves no process.
//! Needs valkey-server and haproxy (scripts/install-deps.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::json;

mod haproxy_cfg;
mod start_stop;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The haproxy binary (not on a non-root user's PATH on Debian); fails
/// loudly when it is missing: fleet.sh needs it.
fn haproxy() -> &'static str {
    for bin in ["haproxy", "/usr/sbin/haproxy"] {
        if fleet::ProcSpec::quiet("haproxy", bin)
            .arg("-v")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return bin;
        }
    }
    panic!(
        "haproxy is required by scripts/fleet.sh and this test: run scripts/install-deps.sh \
         (or apt-get install haproxy)"
    );
}
