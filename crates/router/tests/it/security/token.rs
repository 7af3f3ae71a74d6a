//! The bearer token on every internal route and method, on one listener
//! or on a separate internal listener, and how that listener is configured.

use super::*;

/// Every `/internal/*` and `/admin/*` route the API module registers, read
/// from its source (so that a route added later is covered without editing
/// this test), with the method it takes; path parameters become `w`.
fn guarded_routes() -> Vec<(String, String)> {
    let src = include_str!("../../../src/api/mod.rs");
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
