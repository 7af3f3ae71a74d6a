//! `loadtest dynamo-frontend`: the thin OpenAI frontend that Dynamo's
//! standalone selection service (`python -m dynamo.select_service`, PyPI
//! `ai-dynamo-runtime`) needs, since it selects workers but does not
//! forward requests. One runs beside each selection-service replica; its
//! time and CPU count as Dynamo's.
//!
//! At start it registers every worker with its selector (`POST /workers`:
//! URL, block size, KV-event PUB and replay endpoints; the selector then
//! subscribes to the worker's vLLM KV events itself) and waits for
//! `GET /ready`. Per request (`/v1/completions`, `/v1/chat/completions`):
//!
//! 1. the prompt's token ids, as Dynamo's own frontend makes them: token-id
//!    prompts as given, text tokenized and chat templated locally (our
//!    `tokenize` pipeline, the one the sims use);
//! 2. `POST /select_and_reserve {selection_id, model_name, token_ids}`;
//! 3. the body forwarded unchanged to the chosen worker, its answer
//!    streamed back with its headers (`x-sim-worker`, …);
//! 4. `POST /reservations/{id}/prefill_complete` at the first chunk, and
//!    `DELETE /reservations/{id}` when the answer ends (or the client goes).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};

use protocol::hashing::HashSeed;
use tokenize::{CompletionPrompt, ModelPipeline, completion_prompt};

/// `loadtest dynamo-frontend`.
#[derive(clap::Args, Debug, Clone)]
pub struct FrontendArgs {
    /// Address to serve the OpenAI API on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// The selection service's base URL.
    #[arg(long)]
    pub selector: String,
    /// The served model name.
    #[arg(long)]
    pub model: String,
    /// The model's tokenizer directory.
    #[arg(long)]
    pub tokenizer_dir: PathBuf,
    /// The workers' KV block size.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// KV blocks per worker (told to the selector).
    #[arg(long, default_value_t = 8192)]
    pub total_kv_blocks: usize,
    /// A worker: `URL=PUB,REPLAY` (its KV-event endpoints), repeatable.
    #[arg(long = "worker", num_args = 1.., required = true)]
    pub workers: Vec<String>,
}

struct Frontend {
    selector: String,
    model: String,
    pipeline: ModelPipeline,
    http: reqwest::Client,
}

/// Runs the frontend until the process is killed.
pub async fn frontend(args: FrontendArgs) -> anyhow::Result<()> {
    let dir = args.tokenizer_dir.clone();
    let block = args.block_size;
    let pipeline = tokio::task::spawn_blocking(move || {
        ModelPipeline::load(&dir, block, &HashSeed::from_env_value(None))
    })
    .await
    .context("loading the tokenizer")??;
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(64)
        .build()
        .context("building the HTTP client")?;
    register(&http, &args).await?;
    let app = Arc::new(Frontend {
        selector: args.selector.trim_end_matches('/').to_owned(),
        model: args.model.clone(),
        pipeline,
        http,
    });
    let routes = Router::new()
        .route("/v1/completions", post(forward))
        .route("/v1/chat/completions", post(forward))
        .route("/health", get(|| async { StatusCode::OK }))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    println!("listening on http://{}", args.listen);
    axum::serve(listener, routes)
        .await
        .context("serving the frontend")
}

/// Registers every worker with the selector (retrying while it starts),
/// then waits until it reports them all schedulable.
async fn register(http: &reqwest::Client, args: &FrontendArgs) -> anyhow::Result<()> {
    let base = args.selector.trim_end_matches('/');
    let deadline = Instant::now() + Duration::from_secs(60);
    for (i, spec) in args.workers.iter().enumerate() {
        let (url, kv) = spec
            .split_once('=')
            .with_context(|| format!("--worker {spec:?}: expected URL=PUB,REPLAY"))?;
        let (publisher, replay) = kv
            .split_once(',')
            .with_context(|| format!("--worker {spec:?}: expected URL=PUB,REPLAY"))?;
        let body = json!({
            "worker_id": i + 1,
            "model_name": args.model,
            "endpoint": url,
            "block_size": args.block_size,
            "data_parallel_start_rank": 0,
            "data_parallel_size": 1,
            "max_num_batched_tokens": 8192,
            "total_kv_blocks": args.total_kv_blocks,
            "kv_events_endpoints": {"0": publisher},
            "replay_endpoint": replay,
        });
        loop {
            match http
                .post(format!("{base}/workers"))
                .json(&body)
                .send()
                .await
            {
                Ok(r) if r.status().is_success() || r.status() == StatusCode::CONFLICT => break,
                Ok(r) if r.status().is_client_error() => {
                    bail!("registering {url}: {} {}", r.status(), r.text().await?)
                }
                _ if Instant::now() > deadline => bail!("the selector {base} never accepted {url}"),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    loop {
        let ready: Option<Value> = match http.get(format!("{base}/ready")).send().await {
            Ok(r) => r.json().await.ok(),
            Err(_) => None,
        };
        let workers = ready
            .as_ref()
            .and_then(|v| v["schedulable_workers"].as_u64())
            .unwrap_or(0);
        if workers >= args.workers.len() as u64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the selector {base} is not ready: {ready:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    let body = json!({"error": {"message": message.to_string(), "type": "dynamo_frontend", "code": status.as_u16()}});
    (status, axum::Json(body)).into_response()
}

/// The OpenAI routes: select, forward, account (see the module docs).
async fn forward(State(app): State<Arc<Frontend>>, uri: Uri, body: Bytes) -> Response {
    let chat = uri.path().ends_with("/chat/completions");
    let tokenizing = Arc::clone(&app);
    let parsed = body.clone();
    let ids = match tokio::task::spawn_blocking(move || token_ids(&tokenizing, chat, &parsed)).await
    {
        Ok(Ok(ids)) => ids,
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, format!("{e:#}")),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let id = selection_id();
    let pick = app
        .http
        .post(format!("{}/select_and_reserve", app.selector))
        .json(&json!({"selection_id": id, "model_name": app.model, "token_ids": ids}))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status);
    // From here on the reservation is freed whatever happens.
    let mut reservation = Reservation {
        app: Arc::clone(&app),
        id,
        prefilled: false,
    };
    let answer = match pick {
        Ok(r) => r.json::<Value>().await,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, format!("selection: {e}")),
    };
    let endpoint = match answer.as_ref().map(|v| v["endpoint"].as_str()) {
        Ok(Some(url)) => url.to_owned(),
        Ok(None) => return error(StatusCode::BAD_GATEWAY, "selector answer without endpoint"),
        Err(e) => return error(StatusCode::BAD_GATEWAY, format!("selector answer: {e}")),
    };
    let sent = app
        .http
        .post(format!("{}{}", endpoint.trim_end_matches('/'), uri.path()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_GATEWAY,
                format!("forwarding to {endpoint}: {e}"),
            );
        }
    };
    let mut headers = HeaderMap::new();
    for (k, v) in resp.headers() {
        let name = k.as_str();
        if name == "content-type" || name == "cache-control" || name.starts_with("x-") {
            headers.insert(k.clone(), v.clone());
        }
    }
    let status = resp.status();
    let stream = resp.bytes_stream().map(move |chunk| {
        reservation.first_chunk();
        chunk
    });
    (status, headers, Body::from_stream(stream)).into_response()
}

/// The prompt's token ids, as Dynamo's frontend makes them.
fn token_ids(app: &Frontend, chat: bool, body: &[u8]) -> anyhow::Result<Vec<u32>> {
    if chat {
        let renderer = app
            .pipeline
            .chat
            .as_ref()
            .context("the model's chat template cannot be reproduced")?;
        return Ok(renderer.render_json(body)?.token_ids);
    }
    let json: Value = serde_json::from_slice(body).context("invalid JSON body")?;
    match completion_prompt(&json)? {
        CompletionPrompt::Text(text) => Ok(app.pipeline.tokenizer.encode(&text, true)?),
        CompletionPrompt::Tokens(ids) => Ok(ids),
    }
}

/// A random UUID-shaped id.
fn selection_id() -> String {
    let v: u128 = rand::random();
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// A reservation on the selector: prefill marked complete at the answer's
/// first chunk, freed when the answer is dropped (ended or abandoned).
struct Reservation {
    app: Arc<Frontend>,
    id: String,
    prefilled: bool,
}

impl Reservation {
    fn first_chunk(&mut self) {
        if self.prefilled {
            return;
        }
        self.prefilled = true;
        let app = Arc::clone(&self.app);
        let url = format!("{}/reservations/{}/prefill_complete", app.selector, self.id);
        tokio::spawn(async move {
            let _ = app.http.post(url).json(&json!({})).send().await;
        });
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let app = Arc::clone(&self.app);
        let url = format!("{}/reservations/{}", app.selector, self.id);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = app.http.delete(url).send().await;
            });
        }
    }
}
