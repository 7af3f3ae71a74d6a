//! Password, ACL user and TLS come through the Valkey URL.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use serde_json::json;
use support::router_process::RouterProcess;
use support::{Router, Valkey, args, http, post};

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
    let r = RouterProcess::start_with(
        &tls.url(),
        &[],
        &[
            ("PREFIX_ROUTER_LOG", "warn"),
            ("SSL_CERT_FILE", tls.ca_file.as_str()),
        ],
        None,
    )
    .await;
    let hb = json!({"worker_id": "w", "url": "http://127.0.0.1:9", "model": "m"});
    let (status, body) = r.post("/internal/heartbeat", hb).await;
    assert_eq!(status, 200, "heartbeat over TLS: {body}");
    let ready = http()
        .get(format!("{}/ready", r.base))
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(ready.ok(), Some(200));
}
