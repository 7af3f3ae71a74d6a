//! Where the programs a fleet is made of are: `prefix-router` and
//! `sim-worker` from this workspace's target directory (built in release
//! when missing), `valkey-server` and `haproxy` from the system.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The workspace root (two levels above this crate's directory), where the
/// repository's `target/` and `../shared` are found by default.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .and_then(Path::parent)
        .unwrap_or(manifest)
        .to_path_buf()
}

/// `name` in the target directory of the running executable's profile:
/// beside `deps/`, where a test binary runs from (`cargo test --workspace`
/// builds every binary of the workspace there).
pub fn beside_current_exe(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir = dir.parent()?;
    }
    Some(dir.join(name)).filter(|p| p.is_file())
}

/// The workspace binary `name` beside the running test
/// ([`beside_current_exe`]); the error says how to build it.
pub fn workspace_binary(name: &str) -> anyhow::Result<PathBuf> {
    beside_current_exe(name).with_context(|| {
        format!(
            "no {name} beside this test: run `cargo build --bin {name}` \
             (cargo test --workspace builds it)"
        )
    })
}

/// The real Qwen3 tokenizer of `../shared`, beside the workspace.
pub fn shared_tokenizer_dir() -> PathBuf {
    workspace_root().join("../shared/tokenizers/qwen3")
}

/// Cargo's target directory: `$CARGO_TARGET_DIR`, else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// `name` on `$PATH`, or in the sbin directories (Debian puts `haproxy` in
/// `/usr/sbin`, which a non-root `$PATH` may lack).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The two workspace binaries a fleet runs.
#[derive(Debug, Clone)]
pub struct WorkspaceBinaries {
    /// `prefix-router`.
    pub router: PathBuf,
    /// `sim-worker`.
    pub sim: PathBuf,
}

impl WorkspaceBinaries {
    /// Uses the given paths; otherwise `target/<profile>/…`, building both
    /// with `cargo build` (`--release` for the release profile) if either
    /// is missing.
    pub fn locate(
        router: Option<PathBuf>,
        sim: Option<PathBuf>,
        profile: &str,
    ) -> anyhow::Result<Self> {
        let dir = target_dir().join(profile);
        let router = router.unwrap_or_else(|| dir.join("prefix-router"));
        let sim = sim.unwrap_or_else(|| dir.join("sim-worker"));
        if !router.is_file() || !sim.is_file() {
            build(profile)?;
        }
        for p in [&router, &sim] {
            if !p.is_file() {
                bail!("{} not found (pass --router-bin / --sim-bin)", p.display());
            }
        }
        Ok(WorkspaceBinaries { router, sim })
    }
}

/// `cargo build [--release] --bin prefix-router --bin sim-worker` in the
/// workspace root.
fn build(profile: &str) -> anyhow::Result<()> {
    let mut cmd =
        std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root()).args([
        "build",
        "--bin",
        "prefix-router",
        "--bin",
        "sim-worker",
    ]);
    match profile {
        "release" => {
            cmd.arg("--release");
        }
        "debug" => {}
        other => {
            cmd.args(["--profile", other]);
        }
    }
    eprintln!("loadtest: building the fleet's binaries: {cmd:?}");
    let status = cmd.status().context("running cargo build")?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    Ok(())
}

/// A system program, from `flag` or found with [`which`]; the error says how
/// to install it.
pub fn system_program(flag: Option<PathBuf>, name: &str, hint: &str) -> anyhow::Result<PathBuf> {
    match flag {
        Some(p) if p.is_file() => Ok(p),
        Some(p) => bail!("{} does not exist", p.display()),
        None => which(name).with_context(|| format!("{name} not found on PATH: {hint}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_holds_the_router_crate() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(workspace_root().join("loadtest").is_dir());
    }

    #[test]
    fn which_finds_sh_not_nonsense() {
        assert!(which("sh").is_some());
        assert!(which("no-such-program-xyz").is_none());
    }
}
