//! A model's tokenizer files by Hugging Face id (`--model Qwen/Qwen3-8B`
//! without `--tokenizer-dir`): found in the local Hugging Face cache, or
//! downloaded into it from the hub.
//!
//! The cache is the hub's own layout, shared with `transformers` and vLLM:
//! `<cache>/models--<org>--<name>/snapshots/<commit>/<file>`, with
//! `refs/<revision>` holding the commit a branch or tag points to. The
//! cache is `HF_HUB_CACHE`, else `HF_HOME/hub`, else
//! `~/.cache/huggingface/hub`; `HF_HUB_OFFLINE=1` forbids downloads;
//! `HF_ENDPOINT` names the hub (default `https://huggingface.co`), and
//! `HF_TOKEN` (else the file `huggingface-cli login` writes, `HF_TOKEN_PATH`
//! or `HF_HOME/token`) is sent for gated models. Files are fetched from
//! `<endpoint>/<id>/resolve/<revision>/<file>`, whose `x-repo-commit`
//! header names the snapshot.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

/// Needed: the tokenizer. Optional: its config (special tokens, the chat
/// template) and a chat template kept apart (`chat_template.jinja`).
pub const REQUIRED: &str = "tokenizer.json";
/// Downloaded when the repository has them.
pub const OPTIONAL: [&str; 2] = ["tokenizer_config.json", "chat_template.jinja"];

/// Where the cache is and whether and where to download (no `Debug`: it
/// holds the token).
#[derive(Clone, PartialEq)]
pub struct HubSettings {
    /// The hub cache directory.
    pub cache: PathBuf,
    /// The hub's base URL.
    pub endpoint: String,
    /// No downloads.
    pub offline: bool,
    /// Bearer token for gated repositories.
    pub token: Option<String>,
}

impl HubSettings {
    /// From the environment, as the `huggingface_hub` library reads it.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(var("HOME").unwrap_or_else(|| ".".into())).join(".cache/huggingface")
        });
        let cache = var("HF_HUB_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("hub"));
        // `huggingface-cli login` keeps the token in a file.
        let token_file = var("HF_TOKEN_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("token"));
        let token = var("HF_TOKEN").or_else(|| {
            std::fs::read_to_string(token_file)
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
        });
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
        });
        HubSettings {
            cache,
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into()),
            offline,
            token,
        }
    }
}

/// Whether `name` reads as a hub id (`org/name`), not a served name.
pub fn is_hub_id(name: &str) -> bool {
    let mut parts = name.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty()
                && p != "."
                && p != ".."
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
    };
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

fn is_commit(rev: &str) -> bool {
    rev.len() == 40
        && rev
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A branch, tag or commit name that stays a relative path of plain parts
/// (`refs/pr/1` is one): no empty, `.` or `..` part, no leading `/`.
fn check_revision(rev: &str) -> anyhow::Result<()> {
    let ok = rev.split('/').all(|part| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    });
    if !ok {
        bail!("revision {rev:?} is not a branch, tag or commit name");
    }
    Ok(())
}

/// Largest file taken from the hub (a tokenizer is tens of MB).
const MAX_FILE_BYTES: usize = 256 << 20;

/// The directory holding `id`'s tokenizer files at `revision`: the cached
/// snapshot, downloaded first when it lacks `tokenizer.json` (unless
/// offline). Errors name the missing files and where they were looked for.
pub fn tokenizer_dir(id: &str, revision: &str, hub: &HubSettings) -> anyhow::Result<PathBuf> {
    if !is_hub_id(id) {
        bail!("{id:?} is not a Hugging Face model id (org/name)");
    }
    check_revision(revision)?;
    let repo = hub.cache.join(format!("models--{}", id.replace('/', "--")));
    if let Some(dir) = cached(&repo, revision)? {
        return Ok(dir);
    }
    if hub.offline {
        bail!(
            "model {id:?} at revision {revision:?}: {REQUIRED} is not in the Hugging Face cache ({}) and HF_HUB_OFFLINE forbids downloading it (also wanted: {})",
            repo.display(),
            OPTIONAL.join(", ")
        );
    }
    download(id, revision, &repo, hub)
}

/// The cached snapshot of `revision` if it holds the tokenizer.
fn cached(repo: &Path, revision: &str) -> anyhow::Result<Option<PathBuf>> {
    let commit = if is_commit(revision) {
        revision.to_owned()
    } else {
        match std::fs::read_to_string(repo.join("refs").join(revision)) {
            Ok(c) => c.trim().to_owned(),
            Err(_) => return Ok(None),
        }
    };
    if !is_commit(&commit) {
        bail!(
            "{} does not hold a commit hash",
            repo.join("refs").join(revision).display()
        );
    }
    let dir = repo.join("snapshots").join(&commit);
    Ok(dir.join(REQUIRED).is_file().then_some(dir))
}

/// Downloads the tokenizer files on a thread of its own (configuration is
/// read before, and outside of, the server's runtime).
fn download(id: &str, revision: &str, repo: &Path, hub: &HubSettings) -> anyhow::Result<PathBuf> {
    let (id, revision, repo, hub) = (
        id.to_owned(),
        revision.to_owned(),
        repo.to_owned(),
        hub.clone(),
    );
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a runtime for the download")?;
        rt.block_on(fetch_all(&id, &revision, &repo, &hub))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the download thread panicked"))?
}

async fn fetch_all(
    id: &str,
    revision: &str,
    repo: &Path,
    hub: &HubSettings,
) -> anyhow::Result<PathBuf> {
    // Redirects are followed by hand: the hub names the commit on its own
    // answer, and a large file (LFS) is then served by another host, which
    // must not see the token.
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(300))
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let (commit, body) = fetch(&http, id, revision, REQUIRED, hub)
        .await?
        .with_context(|| {
            format!(
                "model {id:?} at revision {revision:?}: the hub ({}) has no {REQUIRED}",
                hub.endpoint
            )
        })?;
    // Later files from the same commit, whatever the branch does meanwhile.
    let mut files = vec![(REQUIRED, body)];
    for file in OPTIONAL {
        if let Some((_, body)) = fetch(&http, id, &commit, file, hub).await? {
            files.push((file, body));
        }
    }
    let dir = place_snapshot(repo, &commit, &files)?;
    if !is_commit(revision) {
        let r = repo.join("refs").join(revision);
        let parent = r.parent().unwrap_or(repo);
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        let tmp = unique_tmp(parent, "ref");
        let written =
            std::fs::write(&tmp, commit.as_bytes()).and_then(|()| std::fs::rename(&tmp, &r));
        let _ = std::fs::remove_file(&tmp);
        written.with_context(|| format!("writing {}", r.display()))?;
    }
    tracing::info!(model = id, revision, commit, dir = %dir.display(), "downloaded the tokenizer from the hub");
    Ok(dir)
}

/// Redirects followed per file.
const MAX_REDIRECTS: usize = 5;

/// One file: `Some((commit, body))`, `None` if the repository lacks it.
/// Errors name the hub's URL, never a redirect's (it may be signed).
async fn fetch(
    http: &reqwest::Client,
    id: &str,
    revision: &str,
    file: &str,
    hub: &HubSettings,
) -> anyhow::Result<Option<(String, Vec<u8>)>> {
    let first = format!(
        "{}/{id}/resolve/{}/{file}",
        hub.endpoint.trim_end_matches('/'),
        revision.replace('/', "%2F")
    );
    let mut url = reqwest::Url::parse(&first).with_context(|| format!("HF_ENDPOINT: {first}"))?;
    let hub_origin = url.origin();
    let mut commit = is_commit(revision).then(|| revision.to_owned());
    for _ in 0..=MAX_REDIRECTS {
        let mut req = http.get(url.clone());
        if let (Some(t), true) = (&hub.token, url.origin() == hub_origin) {
            req = req.bearer_auth(t);
        }
        let mut resp = req.send().await.with_context(|| format!("GET {first}"))?;
        if let Some(c) = resp
            .headers()
            .get("x-repo-commit")
            .and_then(|v| v.to_str().ok())
            .filter(|c| is_commit(c))
        {
            commit = Some(c.to_owned());
        }
        match resp.status().as_u16() {
            200 => {
                let commit =
                    commit.with_context(|| format!("GET {first}: no x-repo-commit header"))?;
                let mut body = Vec::new();
                while let Some(chunk) = resp
                    .chunk()
                    .await
                    .with_context(|| format!("reading {first}"))?
                {
                    if body.len() + chunk.len() > MAX_FILE_BYTES {
                        bail!("GET {first}: over {MAX_FILE_BYTES} bytes");
                    }
                    body.extend_from_slice(&chunk);
                }
                return Ok(Some((commit, body)));
            }
            301 | 302 | 303 | 307 | 308 => {
                let to = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .with_context(|| format!("GET {first}: a redirect without Location"))?;
                url = url
                    .join(to)
                    .with_context(|| format!("GET {first}: a bad redirect"))?;
            }
            404 => return Ok(None),
            401 | 403 => bail!(
                "GET {first}: HTTP {} (no such model, or a gated or private one: check the id, set HF_TOKEN, accept its terms)",
                resp.status()
            ),
            s => bail!("GET {first}: HTTP {s}"),
        }
    }
    bail!("GET {first}: more than {MAX_REDIRECTS} redirects")
}

/// Writes `files` as `repo/snapshots/<commit>/`, whole or not at all: into
/// a fresh folder beside it, then renamed (a concurrent router that placed
/// the same snapshot first wins).
fn place_snapshot(repo: &Path, commit: &str, files: &[(&str, Vec<u8>)]) -> anyhow::Result<PathBuf> {
    let snapshots = repo.join("snapshots");
    std::fs::create_dir_all(&snapshots)
        .with_context(|| format!("creating {}", snapshots.display()))?;
    let dir = snapshots.join(commit);
    let tmp = unique_tmp(&snapshots, commit);
    let written = std::fs::create_dir(&tmp).and_then(|()| {
        files
            .iter()
            .try_for_each(|(name, body)| std::fs::write(tmp.join(name), body))
    });
    let placed = written.and_then(|()| std::fs::rename(&tmp, &dir));
    let _ = std::fs::remove_dir_all(&tmp);
    match placed {
        Ok(()) => Ok(dir),
        Err(_) if dir.join(REQUIRED).is_file() => Ok(dir),
        Err(e) => Err(e).with_context(|| format!("writing {}", dir.display())),
    }
}

/// A fresh name in `dir`, unique to this process and moment.
fn unique_tmp(dir: &Path, what: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    dir.join(format!(".{what}.{}.{nanos}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_org_slash_name() {
        assert!(is_hub_id("Qwen/Qwen3-8B"));
        assert!(is_hub_id("meta-llama/Llama-3.1-8B-Instruct"));
        for bad in ["qwen3", "a/b/c", "../x", "a/..", "/x", "a/", "a b/c"] {
            assert!(!is_hub_id(bad), "{bad}");
        }
    }

    #[test]
    fn revisions_cannot_leave_the_cache() {
        assert!(check_revision("main").is_ok());
        assert!(check_revision("v1.0").is_ok());
        assert!(check_revision("refs/pr/1").is_ok());
        for bad in ["../../etc", "", "/tmp/x", "a//b", "a/./b", ".", "a/"] {
            assert!(check_revision(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn commits_are_lower_case_hex() {
        assert!(is_commit(&"a".repeat(40)));
        assert!(!is_commit(&"A".repeat(40)));
        assert!(!is_commit(&"a".repeat(39)));
    }
}
