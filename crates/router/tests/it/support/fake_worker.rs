//! A fake OpenAI-compatible worker over real HTTP: records what it gets,
//! answers JSON (with a prefill worker's `kv_transfer_params` when set) or
//! streams Server-Sent Events chunk by chunk on command, and serves
//! `GET /metrics` as the test sets it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use tokio::sync::mpsc;

/// What the test can see and steer.
#[derive(Default)]
pub struct Shared {
    /// Bodies of the requests received, in order.
    pub bodies: Mutex<Vec<serde_json::Value>>,
    /// Paths of the requests received.
    pub paths: Mutex<Vec<String>>,
    /// Requests received.
    pub hits: AtomicUsize,
    /// Set when a streamed response could not be delivered (client gone).
    pub stream_cancelled: AtomicBool,
    /// Status of non-streamed answers (200 unless set).
    pub status: Mutex<Option<StatusCode>>,
    /// When set, the worker drops every connection before answering, as a
    /// crashed worker would.
    pub crashed: AtomicBool,
    /// When set, a non-streamed answer sends its headers and the start of
    /// its JSON, then the connection breaks (a worker dying mid-answer).
    pub cut_body: AtomicBool,
    /// The queue length its ORCA load reports give.
    pub orca_waiting: AtomicUsize,
    /// Each message releases the next SSE chunk of a streamed answer.
    pub release: Mutex<Option<mpsc::UnboundedReceiver<()>>>,
    /// What `GET /metrics` answers (404 while unset).
    pub metrics: Mutex<Option<(StatusCode, String)>>,
    /// How long `GET /metrics` stalls before answering.
    pub metrics_delay: Mutex<Option<Duration>>,
    /// `GET /metrics` requests received (not counted in `hits`).
    pub metrics_hits: AtomicUsize,
    /// How long every other request stalls before it is answered (none
    /// unless set), like an engine busy with a long generation.
    pub answer_delay: Mutex<Option<Duration>>,
    /// The W3C trace context of each request (`traceparent`, `tracestate`).
    pub trace: Mutex<Vec<(Option<String>, Option<String>)>>,
    /// The headers of each request, in order.
    pub headers: Mutex<Vec<HeaderMap>>,
    /// When set, non-streamed answers carry it as `kv_transfer_params`, as
    /// a vLLM prefill worker's answer to a remote decode's request does.
    pub kv_transfer_params: Mutex<Option<serde_json::Value>>,
    /// When set, answers carry it as their `usage` (a streamed answer in
    /// an event of its own before `[DONE]`), as vLLM's do.
    pub usage: Mutex<Option<serde_json::Value>>,
}

/// The SSE chunks a streamed answer sends, in order.
pub const SSE_CHUNKS: [&str; 3] = [
    "data: {\"choices\":[{\"text\":\"Hel\"}]}\n\n",
    "data: {\"choices\":[{\"text\":\"lo\",\"finish_reason\":\"length\"}]}\n\n",
    "data: [DONE]\n\n",
];

/// A running fake worker.
pub struct FakeWorker {
    /// Its address.
    pub addr: SocketAddr,
    /// Its recorded state and switches.
    pub shared: Arc<Shared>,
    /// Sends one release per SSE chunk.
    pub release: mpsc::UnboundedSender<()>,
    name: String,
}

impl FakeWorker {
    /// Starts a worker that names itself `name` in its answers.
    pub async fn start(name: &str) -> FakeWorker {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            release: Mutex::new(Some(rx)),
            ..Shared::default()
        });
        let app = Router::new()
            .fallback(handle)
            .with_state((shared.clone(), name.to_owned()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeWorker {
            addr,
            shared,
            release: tx,
            name: name.to_owned(),
        }
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests it received.
    pub fn hits(&self) -> usize {
        self.shared.hits.load(Ordering::SeqCst)
    }

    /// Registers it for `model` straight in `valkey` (namespace `pr`), with
    /// a lease that outlives the slowest test on 2 shared cores.
    pub async fn register_in(&self, valkey: &super::Valkey, model: &str) {
        let ttls = state::StateTtls {
            worker_lease: Duration::from_secs(600),
            ..state::StateTtls::default()
        };
        let hb = state::WorkerHeartbeat {
            worker_id: self.name.clone(),
            url: self.url(),
            load: None,
        };
        super::store(valkey, "pr", "test-probe", ttls)
            .heartbeat(model, &hb)
            .await
            .expect("registering a fake worker");
    }

    /// Makes `GET /metrics` answer `status` with `body`.
    pub fn set_metrics(&self, status: StatusCode, body: impl Into<String>) {
        *self.shared.metrics.lock().unwrap() = Some((status, body.into()));
    }
}

async fn metrics(shared: &Shared) -> Response {
    shared.metrics_hits.fetch_add(1, Ordering::SeqCst);
    let delay = *shared.metrics_delay.lock().unwrap();
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let answer = shared.metrics.lock().unwrap().clone();
    match answer {
        Some((status, body)) => (
            status,
            [("content-type", "text/plain; version=0.0.4")],
            body,
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn handle(
    State((shared, name)): State<(Arc<Shared>, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if shared.crashed.load(Ordering::SeqCst) {
        panic!("crashed worker: the connection drops before any byte");
    }
    if uri.path() == "/metrics" {
        return metrics(&shared).await;
    }
    shared.hits.fetch_add(1, Ordering::SeqCst);
    shared.paths.lock().unwrap().push(uri.path().to_owned());
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    shared
        .trace
        .lock()
        .unwrap()
        .push((header("traceparent"), header("tracestate")));
    shared.headers.lock().unwrap().push(headers.clone());
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    shared.bodies.lock().unwrap().push(json.clone());
    let delay = *shared.answer_delay.lock().unwrap();
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if json["stream"] == true {
        let rx = shared.release.lock().unwrap().take();
        let endless = json["endless"] == true;
        let (tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let shared = shared.clone();
        let usage = shared.usage.lock().unwrap().clone();
        tokio::spawn(async move {
            let mut rx = rx;
            for (i, chunk) in SSE_CHUNKS.iter().enumerate() {
                // An endless answer never finishes: after its first chunk
                // it only keeps the stream alive (the router ends a
                // client's stream at the answer's `[DONE]`).
                if endless && i > 0 {
                    break;
                }
                if let (Some(u), true) = (&usage, i == SSE_CHUNKS.len() - 1) {
                    let event = format!(
                        "data: {}\n\n",
                        serde_json::json!({"choices": [], "usage": u})
                    );
                    let _ = tx.send(Ok(Bytes::from(event))).await;
                }
                if let Some(r) = rx.as_mut() {
                    let _ = r.recv().await;
                }
                if tx
                    .send(Ok(Bytes::from_static(chunk.as_bytes())))
                    .await
                    .is_err()
                {
                    shared.stream_cancelled.store(true, Ordering::SeqCst);
                    return;
                }
            }
            // Like an engine still generating: keep sending until the
            // proxy drops the connection, which must happen when its client
            // goes away.
            if !endless {
                return;
            }
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                if tx
                    .send(Ok(Bytes::from_static(b": keep-alive\n\n")))
                    .await
                    .is_err()
                {
                    shared.stream_cancelled.store(true, Ordering::SeqCst);
                    return;
                }
            }
        });
        let stream = tokio_stream_from(body_rx);
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    if shared.cut_body.load(Ordering::SeqCst) {
        // The error waits until the headers and the first bytes are out.
        let parts = futures_util::stream::iter([true, false]).then(|first| async move {
            if first {
                Ok(Bytes::from_static(b"{\"choices\":[{\"text\":\"o"))
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Err(std::io::Error::other("the worker died mid-answer"))
            }
        });
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(parts))
            .unwrap();
    }
    let status = shared.status.lock().unwrap().unwrap_or(StatusCode::OK);
    let mut answer = serde_json::json!({
        "worker": name,
        "path": uri.path(),
        "echo": json,
        "choices": [{ "text": "ok", "finish_reason": "stop" }],
    });
    if let Some(params) = shared.kv_transfer_params.lock().unwrap().clone() {
        answer["kv_transfer_params"] = params;
    }
    if let Some(usage) = shared.usage.lock().unwrap().clone() {
        answer["usage"] = usage;
    }
    let mut resp = (status, [("x-fake-worker", name)], axum::Json(answer)).into_response();
    // vLLM's ORCA load report, when asked (only TEXT here).
    let asked = headers
        .get("endpoint-load-metrics-format")
        .and_then(|v| v.to_str().ok());
    if asked.is_some_and(|f| f.eq_ignore_ascii_case("text")) {
        let waiting = shared.orca_waiting.load(Ordering::SeqCst);
        let report = format!(
            "TEXT named_metrics.num_requests_waiting={waiting}.0, named_metrics.kv_cache_usage_perc=0.4"
        );
        resp.headers_mut()
            .insert("endpoint-load-metrics", report.parse().unwrap());
    }
    resp
}

fn tokio_stream_from(
    mut rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
