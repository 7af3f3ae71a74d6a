//! `--model <Hugging Face id>` without `--tokenizer-dir`: the router takes
//! the tokenizer from the Hugging Face cache, or downloads it into the
//! cache from a hub (here a local server with the hub's URL layout and the
//! shared Qwen3 tokenizer, named by `HF_ENDPOINT`), at a pinned revision
//! when asked; offline it needs the cache, and says what is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use support::router_process::RouterProcess;
use support::{TOKEN, Valkey, http, tokenizer_dir};

const ID: &str = "Qwen/Qwen3-8B";
const MAIN: &str = "1111111111111111111111111111111111111111";
const V1: &str = "2222222222222222222222222222222222222222";
/// A revision whose tokenizer_config.json the hub fails to serve.
const BROKEN: &str = "3333333333333333333333333333333333333333";

/// Requests the hub answered, and where its content host is.
#[derive(Default)]
struct Hub {
    served: AtomicUsize,
    cdn: String,
}

async fn resolve(
    State(hub): State<Arc<Hub>>,
    UrlPath((org, name, rev, file)): UrlPath<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    hub.served.fetch_add(1, Ordering::Relaxed);
    // A gated repository: the same tokenizer, for the right token only.
    let authorized =
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bearer hf_secret");
    if org == "gated" && !authorized {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let commit = match rev.as_str() {
        "main" | MAIN => MAIN,
        "v1" | V1 => V1,
        BROKEN if file == "tokenizer_config.json" => {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        BROKEN => BROKEN,
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    if format!("{org}/{name}") != ID && org != "gated" {
        return StatusCode::NOT_FOUND.into_response();
    }
    if !tokenizer_dir().join(&file).is_file() {
        return StatusCode::NOT_FOUND.into_response();
    }
    // Large files live in LFS: the hub names the commit and redirects to
    // a content host, which names none.
    if file == "tokenizer.json" {
        return (
            StatusCode::FOUND,
            [
                ("x-repo-commit", commit),
                (
                    "location",
                    format!("{}/cdn/tokenizer.json", hub.cdn).as_str(),
                ),
            ],
        )
            .into_response();
    }
    let body = std::fs::read(tokenizer_dir().join(&file)).unwrap();
    ([("x-repo-commit", commit)], body).into_response()
}

async fn cdn(UrlPath(file): UrlPath<String>, headers: HeaderMap) -> Response {
    // The token is for the hub only.
    if headers.get("authorization").is_some() {
        return StatusCode::BAD_REQUEST.into_response();
    }
    match std::fs::read(tokenizer_dir().join(&file)) {
        Ok(body) => body.into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The hub, and its content host on another port (another origin).
async fn start_hub() -> (String, Arc<Hub>) {
    let cdn_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cdn_url = format!("http://{}", cdn_listener.local_addr().unwrap());
    let cdn_app = axum::Router::new().route("/cdn/{file}", axum::routing::get(cdn));
    tokio::spawn(async move { axum::serve(cdn_listener, cdn_app).await });
    let hub = Arc::new(Hub {
        served: AtomicUsize::new(0),
        cdn: cdn_url,
    });
    let app = axum::Router::new()
        .route(
            "/{org}/{name}/resolve/{rev}/{file}",
            axum::routing::get(resolve),
        )
        .with_state(hub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, hub)
}

/// What a router's explain says of one chat: its token count and hashes.
async fn explained(r: &RouterProcess, model: &str) -> (u64, serde_json::Value) {
    let body = json!({"model": model, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is a prefix cache? Explain it with an example, please."}
    ]});
    let v: serde_json::Value = http()
        .post(format!("{}/admin/explain", r.base))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        v["prompt_tokens"].as_u64().unwrap(),
        v["block_hashes"].clone(),
    )
}

/// `prefix-router serve` that is expected to refuse to start: its stderr.
fn refused(valkey: &str, extra: &[&str], env: &[(&str, &str)]) -> String {
    let mut serve = support::router_command("serve")
        .args(["--listen", "127.0.0.1:0", "--valkey", valkey])
        .args(extra.iter().copied())
        .env("PREFIX_ROUTER_INTERNAL_TOKEN", TOKEN);
    for (k, v) in env {
        serve = serve.env(k, v);
    }
    let out = serve.output().unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn snapshot(cache: &Path, commit: &str) -> PathBuf {
    cache.join("models--Qwen--Qwen3-8B/snapshots").join(commit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_named_by_its_hub_id_finds_or_fetches_its_tokenizer() {
    let valkey = Valkey::start();
    let (endpoint, hub) = start_hub().await;
    let cache = tempfile::tempdir().unwrap();
    let cache_s = cache.path().to_str().unwrap().to_owned();
    let online = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", cache_s.as_str()),
        ("PREFIX_ROUTER_LOG", "warn"),
    ];
    // The reference: the same tokenizer by directory.
    let shared_dir = tokenizer_dir();
    let by_dir = RouterProcess::start_with(
        &valkey.url(),
        &[
            "--model",
            ID,
            "--tokenizer-dir",
            shared_dir.to_str().unwrap(),
            "--key-prefix",
            "a",
        ],
        &[("PREFIX_ROUTER_LOG", "warn")],
        None,
    )
    .await;
    let want = explained(&by_dir, ID).await;

    // Online, empty cache: downloaded into the hub's layout.
    let fetched = RouterProcess::start_with(
        &valkey.url(),
        &["--model", ID, "--key-prefix", "b"],
        &online,
        None,
    )
    .await;
    assert_eq!(explained(&fetched, ID).await, want);
    let snap = snapshot(cache.path(), MAIN);
    assert!(snap.join("tokenizer.json").is_file());
    assert!(snap.join("tokenizer_config.json").is_file());
    assert!(
        !snap.join("chat_template.jinja").exists(),
        "the hub has none"
    );
    assert_eq!(
        std::fs::read_to_string(cache.path().join("models--Qwen--Qwen3-8B/refs/main")).unwrap(),
        MAIN
    );
    let after_download = hub.served.load(Ordering::Relaxed);
    assert!(after_download >= 2);

    // Cached: a second router asks the hub nothing, even offline.
    let offline = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", cache_s.as_str()),
        ("HF_HUB_OFFLINE", "1"),
        ("PREFIX_ROUTER_LOG", "warn"),
    ];
    let cached = RouterProcess::start_with(
        &valkey.url(),
        &["--model", ID, "--key-prefix", "c"],
        &offline,
        None,
    )
    .await;
    assert_eq!(explained(&cached, ID).await, want);
    assert_eq!(hub.served.load(Ordering::Relaxed), after_download);

    // A pinned revision: its own snapshot.
    let pinned = RouterProcess::start_with(
        &valkey.url(),
        &["--model", ID, "--model-revision", "v1", "--key-prefix", "d"],
        &online,
        None,
    )
    .await;
    assert_eq!(explained(&pinned, ID).await, want);
    assert!(snapshot(cache.path(), V1).join("tokenizer.json").is_file());

    // With a token (a gated model's): the content host never sees it.
    let cache2 = tempfile::tempdir().unwrap();
    let with_token = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HUB_CACHE", cache2.path().to_str().unwrap()),
        ("HF_TOKEN", "hf_secret"),
        ("PREFIX_ROUTER_LOG", "warn"),
    ];
    let tokened = RouterProcess::start_with(
        &valkey.url(),
        &["--model", ID, "--key-prefix", "e"],
        &with_token,
        None,
    )
    .await;
    assert_eq!(explained(&tokened, ID).await, want);

    // A gated model with the token `huggingface-cli login` saved.
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("token"), "hf_secret\n").unwrap();
    let logged_in = [
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_HOME", home.path().to_str().unwrap()),
        ("PREFIX_ROUTER_LOG", "warn"),
    ];
    let gated = RouterProcess::start_with(
        &valkey.url(),
        &["--model", "gated/model", "--key-prefix", "f"],
        &logged_in,
        None,
    )
    .await;
    assert_eq!(explained(&gated, "gated/model").await, want);
    assert!(
        home.path()
            .join("hub/models--gated--model/refs/main")
            .is_file()
    );

    // Offline with a revision not in the cache: refused, naming the file
    // and the cache.
    let err = refused(
        &valkey.url(),
        &["--model", ID, "--model-revision", "v2"],
        &offline,
    );
    assert!(
        err.contains("tokenizer.json") && err.contains(&cache_s),
        "{err}"
    );
    assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
    // Online, but the hub has no such revision.
    let err = refused(
        &valkey.url(),
        &["--model", ID, "--model-revision", "v2"],
        &online,
    );
    assert!(err.contains("has no tokenizer.json"), "{err}");
    // A gated model without a token.
    let err = refused(&valkey.url(), &["--model", "gated/model"], &online);
    assert!(err.contains("HF_TOKEN"), "{err}");
    // Revisions that would leave the cache.
    let outside = cache.path().join("outside");
    for rev in ["../../x", outside.to_str().unwrap()] {
        let err = refused(
            &valkey.url(),
            &["--model", ID, "--model-revision", rev],
            &online,
        );
        assert!(err.contains("revision"), "{err}");
    }
    assert!(!outside.exists());
    // A download that fails halfway leaves no snapshot to trust later.
    let err = refused(
        &valkey.url(),
        &["--model", ID, "--model-revision", BROKEN],
        &online,
    );
    assert!(err.contains("HTTP 500"), "{err}");
    assert!(!snapshot(cache.path(), BROKEN).exists());
    let snapshots =
        std::fs::read_dir(cache.path().join("models--Qwen--Qwen3-8B/snapshots")).unwrap();
    assert_eq!(
        snapshots.count(),
        2,
        "only the two whole snapshots, no leftovers"
    );
}
