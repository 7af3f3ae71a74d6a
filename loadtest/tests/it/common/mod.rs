//! What the load test's integration tests share.

use std::path::PathBuf;

use fleet::binaries::WorkspaceBinaries;

/// The workspace binaries of the profile this test was built with
/// (`target/<profile>/`, beside `deps/`), built if missing.
pub fn binaries() -> WorkspaceBinaries {
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir: PathBuf = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .to_owned();
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_owned();
    let (router, sim) = (
        profile_dir.join("prefix-router"),
        profile_dir.join("sim-worker"),
    );
    if router.is_file() && sim.is_file() {
        WorkspaceBinaries { router, sim }
    } else {
        WorkspaceBinaries::locate(None, None, &profile).expect("building the fleet's binaries")
    }
}

/// A runner of tiny fleets for `arm`: `sims` sim-workers of 2,048 blocks at
/// 1/20 of the modelled time behind the builtin balancer, logs under
/// `out`, `calibration` pairs first.
#[allow(dead_code)] // not every test binary runs a fleet
pub fn tiny_runner(
    out: &std::path::Path,
    arm: &loadtest::topology::Arm,
    sims: usize,
    calibration: usize,
) -> loadtest::runner::Runner {
    use loadtest::topology::{BalancerKind, FleetSpec, RouterCommon, SimSettings};
    use std::time::Duration;
    let bins = binaries();
    let valkey = fleet::binaries::which("valkey-server")
        .expect("valkey-server (run scripts/install-deps.sh)");
    loadtest::runner::Runner {
        base: FleetSpec {
            arm: arm.clone(),
            routers: RouterCommon {
                program: bins.router,
                token: "tiny-fleet-token".into(),
                // The routing deadline of the router tests' support (the
                // default 20 ms is for production): on a loaded CI machine a
                // call past 20 ms falls back to consistent hashing, and the
                // P/D arms then served some turns colocated, uncounted on a
                // path (`pd_smoke` saw 9-10 of 12).
                extra_args: vec!["--valkey-timeout".into(), "2s".into()],
                log_level: "warn".into(),
            },
            sim_program: bins.sim,
            sims: SimSettings {
                count: sims,
                num_blocks: 2048,
                time_scale: 0.05,
                max_num_seqs: 64,
                extra_args: vec![],
            },
            valkey_program: valkey,
            valkey_aof: false,
            valkey_cluster: false,
            balancer: BalancerKind::Builtin,
            model: "qwen3".into(),
            tokenizer_dir: loadtest::topology::default_tokenizer_dir(),
            dir: out.join("logs"),
            lmcache_venv: None,
        },
        drive: loadtest::drive::DriveOptions {
            model: "qwen3".into(),
            stream: true,
        },
        request_timeout: Duration::from_secs(20),
        calibration_pairs: calibration,
        window_s: 1.0,
        event_at: 0.5,
        event: loadtest::scenario::EventSettings {
            down_for: Duration::ZERO,
            valkey_keeps_data: false,
        },
        out_dir: out.to_owned(),
    }
}
