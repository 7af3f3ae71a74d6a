//! Security and bad input over real HTTP, against real valkey-servers:
//! the bearer token on every internal route and method, the separate
//! internal listener, the body, depth and prompt limits, slow clients cut
//! off at the socket, JSON errors for malformed requests, and no secret in
//! the logs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use state::{StateTtls, WorkerHeartbeat};
use support::fake_worker::{FakeWorker, SSE_CHUNKS};
use support::router_process::RouterProcess;
use support::{M, Router, TOKEN, Valkey, args, http, raw_state, store, tokenizer_dir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const QWEN: &str = "qwen3";

/// Asserts `body` is the API's JSON error shape for `status`.
fn assert_json_error(status: u16, body: &[u8], what: &str) -> Value {
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "{what}: {status} body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(body)
        )
    });
    let err = &v["error"];
    assert!(
        err["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: no message in {v}"
    );
    assert!(err["type"].as_str().is_some(), "{what}: no type in {v}");
    assert_eq!(err["code"], status, "{what}: code in {v}");
    v
}

/// Sends `method path` with an optional token and body; (status, body).
async fn send(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, bytes::Bytes) {
    let mut req = http().request(method.parse::<Method>().unwrap(), url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.body(b.to_owned());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap())
}

/// Every `/internal/*` and `/admin/*` route the API module registers, read
/// from its source (so that a route added later is covered without editing
/// this test), with the method it takes; path parameters become `w`.
fn guarded_routes() -> Vec<(String, String)> {
    let src = include_str!("../../src/api/mod.rs");
    let mut routes = Vec::new();
    for piece in src.split(".route(").skip(1) {
        let Some(rest) = piece.trim_start().strip_prefix('"') else {
            continue;
        };
        let path = &rest[..rest.find('"').unwrap()];
        if !(path.starts_with("/internal") || path.starts_with("/admin")) {
            continue;
        }
        let after = &rest[path.len() + 1..];
        let method = ["get", "post", "delete", "put", "patch"]
            .into_iter()
            .find(|m| {
                after
                    .trim_start_matches([',', ' ', '\n'])
                    .starts_with(&format!("{m}("))
            })
            .unwrap_or_else(|| panic!("no method for {path}"));
        let concrete = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "w" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        routes.push((method.to_uppercase(), concrete));
    }
    assert!(
        routes.len() >= 7,
        "expected the push API and admin routes, read {routes:?}"
    );
    routes
}

const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"];

/// On `base`: every guarded route answers 401 (its method) or 405 (any
/// other) without the exact token, never reaching its handler; with the
/// token, its own method passes auth.
async fn assert_token_enforced(base: &str) {
    let routes = guarded_routes();
    for (own, path) in &routes {
        let url = format!("{base}{path}");
        for method in METHODS {
            for token in [
                None,
                Some("wrong"),
                Some("test-token-"),
                Some(""),
                Some("TEST-TOKEN"),
            ] {
                let (st, body) = send(method, &url, token, Some("{}")).await;
                let what = format!("{method} {path} with {token:?}");
                if method == own {
                    assert_eq!(st, 401, "{what}");
                    let v = assert_json_error(st, &body, &what);
                    assert_eq!(v["error"]["type"], "unauthorized");
                } else {
                    assert!(st == 401 || st == 405, "{what}: {st}");
                    if method != "HEAD" {
                        assert_json_error(st, &body, &what);
                    }
                }
            }
        }
        // The exact token passes (the handler then judges the body).
        let (st, body) = send(own, &url, Some(TOKEN), Some("{}")).await;
        assert_ne!(st, 401, "{own} {path} with the token: {body:?}");
        // The scheme name is case-insensitive (RFC 7235).
        let resp = http()
            .request(own.parse::<Method>().unwrap(), &url)
            .header("authorization", format!("bearer {TOKEN}"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_ne!(resp.status().as_u16(), 401, "{own} {path} with 'bearer'");
        // A token in another scheme or header does not.
        let resp = http()
            .request(own.parse::<Method>().unwrap(), &url)
            .header("authorization", format!("Basic {TOKEN}"))
            .header("x-api-key", TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{own} {path} with Basic");
    }
}

#[tokio::test]
async fn every_internal_route_and_method_needs_the_token_on_one_listener() {
    let v = Valkey::start();
    let r = Router::start(&v.url(), args()).await;
    assert_token_enforced(&format!("http://{}", r.addr)).await;
    // Everything is on the one listener: public routes need no token.
    for path in ["/health", "/ready", "/metrics", "/v1/models"] {
        let (st, _) = send("GET", &r.url(path), None, None).await;
        assert_eq!(st, 200, "{path}");
    }
    r.stop().await;
}

#[tokio::test]
async fn with_an_internal_listener_internal_routes_exist_only_there() {
    let v = Valkey::start();
    let w = FakeWorker::start("w0").await;
    let mut a = args();
    a.model = Some(M.into());
    let r = Router::start_split(&v.url(), a).await;
    let public = format!("http://{}", r.addr);
    let internal = format!("http://{}", r.internal.unwrap());
    assert_token_enforced(&internal).await;

    // On the public listener, every internal and admin route and /metrics
    // is a JSON 404 whatever the method and token: nothing there to guess.
    let mut hidden: Vec<String> = guarded_routes().into_iter().map(|(_, p)| p).collect();
    hidden.extend(["/metrics".into(), "/internal/anything".into()]);
    for path in &hidden {
        for method in METHODS {
            for token in [None, Some(TOKEN)] {
                let (st, body) = send(method, &format!("{public}{path}"), token, Some("{}")).await;
                assert_eq!(st, 404, "public {method} {path} with {token:?}");
                if method != "HEAD" {
                    assert_json_error(st, &body, path);
                }
            }
        }
    }
    // The OpenAI routes are public only.
    for path in ["/v1/models", "/v1/completions", "/v1/chat/completions"] {
        let (st, body) = send(
            "POST",
            &format!("{internal}{path}"),
            Some(TOKEN),
            Some("{}"),
        )
        .await;
        assert_eq!(st, 404, "internal {path}");
        assert_json_error(st, &body, path);
    }
    // Probes answer on both; metrics only on the internal one.
    for base in [&public, &internal] {
        for path in ["/health", "/ready"] {
            assert_eq!(
                send("GET", &format!("{base}{path}"), None, None).await.0,
                200
            );
        }
    }
    assert_eq!(
        send("GET", &format!("{internal}/metrics"), None, None)
            .await
            .0,
        200
    );

    // The push API works on the internal listener, and its state serves the
    // public one.
    let hb = json!({"worker_id": "w0", "url": w.url(), "model": M}).to_string();
    let (st, body) = send(
        "POST",
        &format!("{internal}/internal/heartbeat"),
        Some(TOKEN),
        Some(&hb),
    )
    .await;
    assert_eq!(st, 200, "{body:?}");
    let resp = http()
        .post(format!("{public}/v1/completions"))
        .json(&json!({"model": M, "prompt": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(w.hits(), 1);
    r.stop().await;
}

#[test]
fn internal_listen_is_configured_like_the_other_flags() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: prefix_router::ServeArgs,
    }
    let resolve = |argv: &[&str]| {
        let cli = Cli::try_parse_from(std::iter::once("serve").chain(argv.iter().copied()))?;
        prefix_router::ServeConfig::resolve(cli.serve)
    };
    let base = ["--internal-token", "t"];
    let cfg = resolve(&base).unwrap();
    assert_eq!(cfg.internal_listen, None, "off by default");
    assert_eq!(cfg.client_timeout, Duration::from_secs(30));
    assert_eq!(cfg.max_prompt_tokens, None, "each model's context length");
    let cfg = resolve(
        &[
            &base[..],
            &[
                "--internal-listen",
                "127.0.0.1:9100",
                "--client-timeout",
                "5s",
                "--max-prompt-tokens",
                "4096",
            ],
        ]
        .concat(),
    )
    .unwrap();
    assert_eq!(cfg.internal_listen.unwrap().to_string(), "127.0.0.1:9100");
    assert_eq!(cfg.client_timeout, Duration::from_secs(5));
    assert_eq!(cfg.max_prompt_tokens, Some(4096));
    // From the file, with the same names.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.toml");
    std::fs::write(
        &file,
        "internal_token = \"t\"\ninternal_listen = \"127.0.0.1:9101\"\nclient_timeout = \"2s\"\nmax_prompt_tokens = 10\n",
    )
    .unwrap();
    let cfg = resolve(&["--config", file.to_str().unwrap()]).unwrap();
    assert_eq!(cfg.internal_listen.unwrap().port(), 9101);
    assert_eq!(cfg.client_timeout, Duration::from_secs(2));
    assert_eq!(cfg.max_prompt_tokens, Some(10));
    // The same address twice, a zero limit or timeout: refused.
    for bad in [
        &[
            "--listen",
            "127.0.0.1:9102",
            "--internal-listen",
            "127.0.0.1:9102",
        ][..],
        &["--max-prompt-tokens", "0"],
        &["--client-timeout", "0s"],
    ] {
        assert!(resolve(&[&base[..], bad].concat()).is_err(), "{bad:?}");
    }
    // Debug output hides the token and the Valkey password.
    let cfg = resolve(&[
        "--internal-token",
        "tok-SECRET",
        "--valkey",
        "redis://:pw-SECRET@h:1",
    ])
    .unwrap();
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(shown.contains("redis://:***@h:1"), "{shown}");
}

/// A Valkey and a router with the real tokenizer for [`QWEN`], `n` fake
/// workers registered with long leases, and `tweak` applied to the flags.
async fn fleet(
    n: usize,
    tweak: impl FnOnce(&mut prefix_router::ServeArgs),
) -> (Valkey, Router, Vec<FakeWorker>) {
    let v = Valkey::start();
    let mut a = args();
    a.model = Some(QWEN.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    tweak(&mut a);
    let r = Router::start(&v.url(), a).await;
    // Serving only once the tokenizer is loaded: until then connections
    // wait in the backlog, where no deadline runs.
    wait_healthy(&r).await;
    let ttls = StateTtls {
        worker_lease: Duration::from_secs(600),
        ..StateTtls::default()
    };
    let s = store(&v, "pr", "test-probe", ttls);
    let mut workers = Vec::new();
    for i in 0..n {
        let w = FakeWorker::start(&format!("w{i}")).await;
        let hb = WorkerHeartbeat {
            worker_id: w.name().into(),
            url: w.url(),
            load: None,
        };
        s.heartbeat(QWEN, &hb).await.unwrap();
        workers.push(w);
    }
    (v, r, workers)
}

async fn wait_healthy(r: &Router) {
    for _ in 0..600 {
        if let Ok(resp) = http().get(r.url("/health")).send().await
            && resp.status().is_success()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("router did not come up");
}

#[tokio::test]
async fn bodies_over_the_limit_are_a_json_413() {
    let (_v, r, workers) = fleet(1, |a| a.max_body_bytes = Some(64 << 10)).await;
    let big = json!({"model": QWEN, "prompt": "x".repeat(70 << 10)}).to_string();
    for path in [
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/embeddings",
        "/admin/explain",
        "/internal/stored",
    ] {
        // With a Content-Length, and chunked (no length known up front).
        let (st, body) = send("POST", &r.url(path), Some(TOKEN), Some(&big)).await;
        assert_eq!(st, 413, "{path}");
        let v = assert_json_error(st, &body, path);
        assert_eq!(v["error"]["type"], "body_too_large");
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big
            .as_bytes()
            .chunks(8192)
            .map(|c| Ok(c.to_vec()))
            .collect();
        let resp = http()
            .post(r.url(path))
            .bearer_auth(TOKEN)
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )))
            .send()
            .await
            .unwrap();
        let st = resp.status().as_u16();
        assert_eq!(st, 413, "{path} chunked");
        assert_json_error(st, &resp.bytes().await.unwrap(), path);
    }
    assert_eq!(workers[0].hits(), 0);
    r.stop().await;
}

#[tokio::test]
async fn json_nested_too_deep_is_a_json_400_without_harm() {
    let (v, r, workers) = fleet(1, |_| {}).await;
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let bomb = deep(100_000);
    for path in [
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/embeddings",
        "/admin/explain",
        "/internal/heartbeat",
        "/internal/stored",
        "/internal/eviction",
        "/internal/sync",
    ] {
        let (st, body) = send("POST", &r.url(path), Some(TOKEN), Some(&bomb)).await;
        assert_eq!(st, 400, "{path}");
        let v = assert_json_error(st, &body, path);
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains("nested deeper than 64"), "{path}: {msg}");
    }
    // Deep inside an otherwise valid request: 65 levels refused, 60 routed.
    let with_extra = |n: usize| {
        format!(
            "{{\"model\":\"{QWEN}\",\"prompt\":\"hi\",\"extra\":{}}}",
            deep(n)
        )
    };
    let (st, body) = send(
        "POST",
        &r.url("/v1/completions"),
        None,
        Some(&with_extra(64)),
    )
    .await;
    assert_eq!(st, 400);
    assert_json_error(st, &body, "65 levels");
    let (st, _) = send(
        "POST",
        &r.url("/v1/completions"),
        None,
        Some(&with_extra(59)),
    )
    .await;
    assert_eq!(st, 200);
    // Brackets inside strings are text, however many.
    let text = json!({"model": QWEN, "prompt": "[".repeat(5000)}).to_string();
    let (st, _) = send("POST", &r.url("/v1/completions"), None, Some(&text)).await;
    assert_eq!(st, 200);
    assert_eq!(workers[0].hits(), 2);
    assert!(r.is_running());
    assert_eq!(send("GET", &r.url("/health"), None, None).await.0, 200);
    drop(v);
    r.stop().await;
}

#[tokio::test]
async fn prompts_over_the_token_limit_are_a_413_before_any_state_is_written() {
    let (v, r, workers) = fleet(2, |a| a.exposure.max_prompt_tokens = Some(100)).await;
    let long_text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let many_ids: Vec<u32> = (1..=101).collect();
    let over: Vec<(&str, Value)> = vec![
        (
            "/v1/completions",
            json!({"model": QWEN, "prompt": long_text}),
        ),
        (
            "/v1/completions",
            json!({"model": QWEN, "prompt": many_ids}),
        ),
        (
            "/v1/completions",
            json!({"model": QWEN, "prompt": [many_ids.clone()]}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": QWEN, "messages": [{"role": "user", "content": long_text}]}),
        ),
        (
            "/admin/explain",
            json!({"model": QWEN, "prompt": long_text}),
        ),
        // No tokenizer for this model: token ids are still counted.
        (
            "/v1/completions",
            json!({"model": "other", "prompt": many_ids}),
        ),
    ];
    for (path, body) in &over {
        let (st, resp) = send("POST", &r.url(path), Some(TOKEN), Some(&body.to_string())).await;
        assert_eq!(st, 413, "{path} {body}");
        let v = assert_json_error(st, &resp, path);
        assert_eq!(v["error"]["type"], "prompt_too_long");
    }
    assert_eq!(workers.iter().map(FakeWorker::hits).sum::<usize>(), 0);
    let st = raw_state(&v, "pr", QWEN);
    assert!(st.forward.is_empty() && st.reverse.is_empty(), "{st:?}");
    // At the limit: routed.
    let at: Vec<u32> = (1..=100).collect();
    let (code, _) = send(
        "POST",
        &r.url("/v1/completions"),
        None,
        Some(&json!({"model": QWEN, "prompt": at}).to_string()),
    )
    .await;
    assert_eq!(code, 200);
    r.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_a_json_4xx() {
    let (_v, r, _workers) = fleet(1, |_| {}).await;
    let cases: Vec<(&str, &str, Option<&str>, u16)> = vec![
        ("POST", "/v1/completions", Some("not json"), 400),
        ("POST", "/v1/completions", Some(""), 400),
        ("POST", "/v1/completions", Some("{}"), 400),
        ("POST", "/v1/completions", Some(r#"{"model": 7}"#), 400),
        ("POST", "/v1/completions", Some(r#"{"model": "a b"}"#), 400),
        (
            "POST",
            "/v1/completions",
            Some(r#"{"model": "qwen3", "prompt": {}}"#),
            400,
        ),
        (
            "POST",
            "/v1/completions",
            Some(r#"{"model": "qwen3", "prompt": [-1]}"#),
            400,
        ),
        (
            "POST",
            "/v1/completions",
            Some(r#"{"model": "nobody-serves", "prompt": "x"}"#),
            404,
        ),
        (
            "POST",
            "/v1/chat/completions",
            Some(r#"{"model": "qwen3", "messages": 5}"#),
            400,
        ),
        (
            "POST",
            "/v1/chat/completions",
            Some("\u{0}\u{1}\u{ff}"),
            400,
        ),
        ("GET", "/v1/completions", None, 405),
        ("DELETE", "/v1/chat/completions", None, 405),
        ("GET", "/nowhere", None, 404),
        ("POST", "/v2/completions", Some("{}"), 404),
        ("GET", "/admin/workers?model=bad%7Bmodel%7D", None, 400),
        ("GET", "/admin/workers?model=a&model=b", None, 400),
        ("DELETE", "/internal/workers/%ff", None, 400),
        (
            "POST",
            "/internal/heartbeat",
            Some(r#"{"worker_id": []}"#),
            400,
        ),
    ];
    for (method, path, body, want) in cases {
        let (st, resp) = send(method, &r.url(path), Some(TOKEN), body).await;
        let what = format!("{method} {path} {body:?}");
        assert_eq!(st, want, "{what}: {resp:?}");
        assert_json_error(st, &resp, &what);
    }
    // Invalid UTF-8 in a JSON string.
    let mut bad = br#"{"model": "qwen3", "prompt": ""#.to_vec();
    bad.extend([0xff, 0xfe]);
    bad.extend(br#""}"#);
    let resp = http()
        .post(r.url("/v1/completions"))
        .body(bad)
        .send()
        .await
        .unwrap();
    let st = resp.status().as_u16();
    assert_eq!(st, 400);
    assert_json_error(st, &resp.bytes().await.unwrap(), "invalid utf-8");
    r.stop().await;
}

/// Reads from `s` until the server closes it (EOF or error); the bytes
/// read and when.
async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Instant>) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, Some(Instant::now())),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, None),
        }
    }
}

/// Reads one response head of a `/health` answer (it fits one read).
async fn read_response_head(s: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("no answer")
        .expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Writes `bytes` one at a time every `gap`, until done or the server
/// closes; returns when it closed (None if it never did).
async fn trickle(s: &mut TcpStream, bytes: &[u8], gap: Duration) -> Option<Instant> {
    let (mut rd, mut wr) = s.split();
    let mut buf = [0u8; 1024];
    for b in bytes {
        tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => return Some(Instant::now()),
                Ok(_) => {}
            },
            _ = tokio::time::sleep(gap) => {
                if wr.write_all(&[*b]).await.is_err() {
                    return Some(Instant::now());
                }
            }
        }
    }
    None
}

#[tokio::test]
async fn slow_clients_are_cut_off_and_slow_answers_are_not() {
    let timeout = Duration::from_millis(1000);
    let (_v, r, workers) = fleet(1, |a| a.exposure.client_timeout = Some(timeout)).await;
    let addr = r.addr;
    let cut_in_time = |started: Instant, closed: Option<Instant>, what: &str| {
        let at = closed.unwrap_or_else(|| panic!("{what}: never cut off"));
        let took = at - started;
        assert!(
            took >= timeout - Duration::from_millis(50) && took < timeout * 4,
            "{what}: cut after {took:?}"
        );
    };

    // Connects and sends nothing.
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let (got, closed) = read_until_closed(&mut s, timeout * 5).await;
    cut_in_time(started, closed, "silent client");
    assert!(got.is_empty());

    // Trickles its head, one byte per 100 ms (each byte alone would reset
    // an idle timeout).
    let head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let closed = trickle(&mut s, head.as_bytes(), Duration::from_millis(100)).await;
    cut_in_time(started, closed, "slow head");

    // Sends its head, then part of the body and stalls: a JSON 408, and
    // the connection is closed.
    let body = json!({"model": QWEN, "prompt": "hello"}).to_string();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        &body[..10]
    );
    let started = Instant::now();
    s.write_all(req.as_bytes()).await.unwrap();
    let (got, closed) = read_until_closed(&mut s, timeout * 5).await;
    cut_in_time(started, closed, "stalled body");
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    let json_at = text.find("\r\n\r\n").unwrap() + 4;
    assert_json_error(408, &text.as_bytes()[json_at..], "stalled body");

    // Trickles its body: the deadline is for the whole body.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /internal/stored HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 200\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let closed = trickle(&mut s, &[b' '; 200], Duration::from_millis(50)).await;
    cut_in_time(started, closed, "slow body");
    assert_eq!(workers[0].hits(), 0);

    // A keep-alive connection may wait idle between requests; the next
    // request's head is timed from its first byte.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(get).await.unwrap();
    assert!(read_response_head(&mut s).await.starts_with("HTTP/1.1 200"));
    tokio::time::sleep(timeout + timeout / 2).await;
    s.write_all(get).await.unwrap();
    assert!(
        read_response_head(&mut s).await.starts_with("HTTP/1.1 200"),
        "idle connection was cut"
    );
    let started = Instant::now();
    let closed = trickle(&mut s, get, Duration::from_millis(200)).await;
    cut_in_time(started, closed, "slow second head");

    // An answer may take longer than the timeout (non-streamed, then
    // streamed): only what the client sends is timed.
    *workers[0].shared.answer_delay.lock().unwrap() = Some(timeout * 2);
    let client = http();
    let complete = |stream: bool| {
        client
            .post(r.url("/v1/completions"))
            .json(&json!({"model": QWEN, "prompt": "hello there", "stream": stream}))
            .send()
    };
    let resp = complete(false).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.bytes().await.unwrap();
    *workers[0].shared.answer_delay.lock().unwrap() = None;
    let resp = complete(true).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let release = workers[0].release.clone();
    tokio::spawn(async move {
        for _ in SSE_CHUNKS {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let _ = release.send(());
        }
    });
    let started = Instant::now();
    let text = resp.text().await.unwrap();
    assert!(started.elapsed() > timeout, "the stream was not slow");
    assert_eq!(text, SSE_CHUNKS.concat());
    assert_eq!(workers[0].hits(), 2);
    assert!(!workers[0].shared.stream_cancelled.load(Ordering::SeqCst));
    assert!(r.is_running());
    r.stop().await;
}

/// Everything the process wrote, as text.
fn read_log(path: &std::path::Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

#[tokio::test]
async fn secrets_never_reach_the_logs() {
    const PASSWORD: &str = "vk-pass-7f3a9c";
    const ACL_PASSWORD: &str = "acl-pass-51d2e8";
    const WRONG: &str = "wrong-pass-c0ffee";
    const SECRET_TOKEN: &str = "tok-9b1e44d0";
    let v = Valkey::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--requirepass",
        PASSWORD,
        "--user",
        "router",
        "on",
        &format!(">{ACL_PASSWORD}"),
        "~*",
        "&*",
        "+@all",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("router.log");
    let w = FakeWorker::start("w0").await;
    // The routers relay answers as streams: release the fake worker's
    // chunks up front, so that the first answer ends at once (else it
    // waits out the router's 30 s --stall-timeout).
    for _ in SSE_CHUNKS {
        w.release.send(()).unwrap();
    }
    let urls = [
        format!("redis://:{PASSWORD}@127.0.0.1:{}", v.port),
        format!("valkey://router:{ACL_PASSWORD}@127.0.0.1:{}/0", v.port),
        format!("redis://:{WRONG}@127.0.0.1:{}", v.port),
        // Nobody listens there: connection errors are logged too.
        format!(
            "redis://:{WRONG}@127.0.0.1:{}",
            support::free_port().unwrap()
        ),
    ];
    for url in &urls {
        let mut r = RouterProcess::start_with(
            url,
            &[
                "--model",
                M,
                "--gc-interval",
                "100ms",
                // Short: each call to an unreachable or refusing Valkey
                // waits it out; what is checked is what gets logged.
                "--valkey-timeout",
                "250ms",
            ],
            &[
                ("PREFIX_ROUTER_LOG", "trace"),
                ("PREFIX_ROUTER_INTERNAL_TOKEN", SECRET_TOKEN),
            ],
            Some(&log),
        )
        .await;
        let c = http();
        let hb = json!({"worker_id": "w0", "url": w.url(), "model": M});
        for token in [SECRET_TOKEN, "not-the-token"] {
            let _ = c
                .post(format!("{}/internal/heartbeat", r.base))
                .bearer_auth(token)
                .json(&hb)
                .send()
                .await;
        }
        let _ = c
            .post(format!("{}/v1/completions", r.base))
            .json(&json!({"model": M, "prompt": "hello"}))
            .send()
            .await;
        let _ = c
            .post(format!("{}/admin/explain", r.base))
            .bearer_auth(SECRET_TOKEN)
            .json(&json!({"model": M, "prompt": "hello"}))
            .send()
            .await;
        let _ = c.get(format!("{}/ready", r.base)).send().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        r.terminate();
    }
    // A config file whose token line does not parse.
    let bad_file = dir.path().join("bad.toml");
    std::fs::write(
        &bad_file,
        format!("valkey = \"redis://:{PASSWORD}@h:1\"\ninternal_token = \"{SECRET_TOKEN}\" oops\n"),
    )
    .unwrap();
    let out = support::router_command("serve")
        .args(["--config", bad_file.to_str().unwrap()])
        .env("PREFIX_ROUTER_LOG", "trace")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let mut text = read_log(&log);
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("line 2"),
        "the parse error names its line: {text}"
    );
    // The logs are there (trace level: hyper, redis and our own lines)...
    assert!(text.contains("serving"), "no log captured: {text}");
    assert!(text.contains(":***@127.0.0.1"), "no redacted URL: {text}");
    assert!(
        text.contains("valkey unavailable") || text.contains("WRONGPASS"),
        "{text}"
    );
    // ...and no secret is in them.
    for secret in [PASSWORD, ACL_PASSWORD, WRONG, SECRET_TOKEN] {
        assert!(
            !text.contains(secret),
            "{secret} leaked: {}",
            text.lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
