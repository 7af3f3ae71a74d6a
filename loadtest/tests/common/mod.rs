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
