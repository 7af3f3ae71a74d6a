//! No secret in the logs.

use super::*;

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
