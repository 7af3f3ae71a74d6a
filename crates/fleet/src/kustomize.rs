//! [`render`]: a kustomization directory rendered by the real `kubectl
//! kustomize` (what `kubectl apply -k` applies), for the deployment tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::binaries::which;

/// `kubectl`: `$KUBECTL`, else found on `$PATH`; the error says how to get it.
pub fn kubectl() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("KUBECTL") {
        return Ok(PathBuf::from(p));
    }
    which("kubectl").context(
        "kubectl not found on PATH (the deployment tests render every kustomization with \
         `kubectl kustomize`): run scripts/install-deps.sh, which installs it, or set $KUBECTL",
    )
}

/// The YAML stream `kubectl kustomize dir` prints; an error with kubectl's
/// own message when it fails (or crashes).
pub fn render(dir: &Path) -> anyhow::Result<String> {
    let kubectl = kubectl()?;
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .with_context(|| format!("running {} kustomize", kubectl.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A Go panic's trace is long; its first lines say what failed.
        let head: Vec<&str> = stderr.lines().take(12).collect();
        bail!(
            "`kubectl kustomize {}` failed ({}):\n{}",
            dir.display(),
            out.status,
            head.join("\n")
        );
    }
    String::from_utf8(out.stdout).context("kubectl kustomize printed non-UTF-8")
}
