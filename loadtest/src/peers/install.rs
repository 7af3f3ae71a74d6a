//! Installing a peer into its own virtualenv, idempotently.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use fleet::process::ProcSpec;

use super::PeerKind;

/// An installed peer: the venv's interpreter that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInstall {
    /// Which peer.
    pub kind: PeerKind,
    /// The venv's `bin/python` (absolute when `root` was).
    pub python: PathBuf,
    /// The installed package version, as `importlib.metadata` reports it.
    pub version: String,
}

/// Installs `kind` into `<root>/<name>-venv` (creating `root` and the venv
/// as needed) with `pip install <name>==<pinned>` from PyPI, and returns the
/// venv's interpreter. Idempotent: when the venv already holds the pinned
/// version nothing is run but one `python -c` version check.
///
/// The venv is made with the first of `$PEERS_PYTHON`, `python3.11`,
/// `python3.12`, `python3.10`, `python3` that is Python ≥ 3.8 with `venv`
/// and `ensurepip` (Debian: the `python3-venv` package).
/// Blocking (runs `python` and `pip`; a first install downloads ~40 MB):
/// call it from `tokio::task::spawn_blocking` in async code.
pub fn install(kind: PeerKind, root: &Path) -> anyhow::Result<PeerInstall> {
    let venv = kind.venv_dir(root);
    let python = venv.join("bin").join("python");
    let pinned = kind.pinned_version();
    if python.exists()
        && let Ok(v) = installed_version(&python, kind)
        && v == pinned
    {
        return Ok(PeerInstall {
            kind,
            python,
            version: v,
        });
    }
    std::fs::create_dir_all(root)
        .with_context(|| format!("creating the peers' directory {}", root.display()))?;
    if !python.exists() {
        let base = base_python()?;
        run(
            ProcSpec::quiet("venv", &base)
                .args(["-m", "venv"])
                .arg(venv.display().to_string()),
            &format!(
                "creating the venv {} with {}",
                venv.display(),
                base.display()
            ),
        )?;
    }
    let requirement = format!("{}=={pinned}", kind.package());
    run(
        ProcSpec::quiet("pip", &python).args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            &requirement,
        ]),
        &format!("pip install {requirement} into {}", venv.display()),
    )?;
    let version = installed_version(&python, kind)?;
    if version != pinned {
        bail!(
            "{} in {} is version {version} after installing {requirement}",
            kind.package(),
            venv.display()
        );
    }
    Ok(PeerInstall {
        kind,
        python,
        version,
    })
}

/// The peer's version installed in the venv of `python`.
fn installed_version(python: &Path, kind: PeerKind) -> anyhow::Result<String> {
    let script = format!(
        "import importlib.metadata as m; print(m.version({:?}))",
        kind.package()
    );
    let out = ProcSpec::quiet("python", python)
        .args(["-c", &script])
        .output()?;
    if !out.status.success() {
        bail!(
            "{} is not installed in {}: {}",
            kind.package(),
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The interpreter that creates the venvs (see [`install`]).
fn base_python() -> anyhow::Result<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("PEERS_PYTHON").filter(|p| !p.is_empty()) {
        candidates.push(PathBuf::from(p));
    }
    candidates.extend(
        ["python3.11", "python3.12", "python3.10", "python3"]
            .iter()
            .map(PathBuf::from),
    );
    let check = "import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 8) else 1)";
    for c in &candidates {
        let ok = ProcSpec::quiet("python", c)
            .args(["-c", check])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Ok(c.clone());
        }
    }
    bail!(
        "no Python >= 3.8 with venv found (tried {}); set PEERS_PYTHON",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Runs `cmd` to completion; fails with its output when it fails.
fn run(cmd: ProcSpec, what: &str) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: cannot run"))?;
    if !out.status.success() {
        bail!(
            "{what}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
