//! Password, ACL user and TLS come through the Valkey URL.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::{Router, TOKEN, Valkey, args, free_port, http, post};

const HB: &str = r#"{"worker_id":"w","url":"http://127.0.0.1:9","model":"m"}"#;

#[tokio::test]
async fn password_and_acl_user_in_the_url() {
    let v = Valkey::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--requirepass",
        "s3cret",
        "--user",
        "router",
        "on",
        ">r0uter-pw",
        "~*",
        "&*",
        "+@all",
    ]);
    let hb: serde_json::Value = serde_json::from_str(HB).unwrap();
    for (url, want) in [
        (format!("redis://:s3cret@127.0.0.1:{}", v.port), 200),
        (
            format!("valkey://router:r0uter-pw@127.0.0.1:{}/0", v.port),
            200,
        ),
        (format!("redis://:wrong-password@127.0.0.1:{}", v.port), 503),
    ] {
        let r = Router::start(&url, args()).await;
        let (st, body) = post(&r, "/internal/heartbeat", &hb).await;
        assert_eq!(st, want, "{url}: {body}");
        assert!(
            !body.to_string().contains("wrong-password"),
            "a secret leaked into a response: {body}"
        );
        r.stop().await;
    }
}

#[tokio::test]
async fn tls_through_a_valkeys_url() {
    let tls = support::tls::TlsValkey::start();
    // The router trusts the CA through SSL_CERT_FILE, as an operator would.
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_prefix-router"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--valkey", &tls.url()])
        .env("PREFIX_ROUTER_INTERNAL_TOKEN", TOKEN)
        .env("SSL_CERT_FILE", &tls.ca_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let mut status = 0;
    for _ in 0..100 {
        if let Ok(resp) = http()
            .post(format!("{base}/internal/heartbeat"))
            .bearer_auth(TOKEN)
            .json(&json!({"worker_id": "w", "url": "http://127.0.0.1:9", "model": "m"}))
            .send()
            .await
        {
            status = resp.status().as_u16();
            if status == 200 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ready = http()
        .get(format!("{base}/ready"))
        .send()
        .await
        .map(|r| r.status().as_u16());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "heartbeat over TLS");
    assert_eq!(ready.ok(), Some(200));
}
