//! Valkey access: a user with read rights only (and no secret in the
//! output), TLS through a `valkeys://` URL.

use super::*;

#[tokio::test]
async fn acl_user_with_read_rights_only_and_no_secret_in_output() {
    let v = Valkey::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--requirepass",
        "adm1n-pw",
        "--user",
        "inspector",
        "on",
        ">insp-s3cret",
        "~*",
        "&*",
        "+@read",
        "+time",
        "+multi",
        "+exec",
    ]);
    let admin = format!("redis://:adm1n-pw@127.0.0.1:{}", v.port);
    let settings = ConnectionSettings::new(&admin);
    let s = StateStore::new(settings, NS, "r", long_ttls(), tiny_limits()).unwrap();
    let hb = WorkerHeartbeat {
        worker_id: "w0".into(),
        url: "http://h:1".into(),
        load: None,
    };
    s.heartbeat(M, &hb).await.unwrap();
    s.stored(M, "w0", &pick(&[1, 2, 3])).await.unwrap();
    let url = format!("redis://inspector:insp-s3cret@127.0.0.1:{}", v.port);
    let o = inspect_env(&url, NS, &["--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = json(&o);
    assert_eq!(
        summary["valkey"],
        format!("redis://inspector:***@127.0.0.1:{}", v.port)
    );
    assert_eq!(worker(&summary["models"][0], "w0")["blocks"], 3);
    // A violation makes the check re-read with MULTI/EXEC: still read-only.
    let mut c = redis::Client::open(admin.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SADD")
        .arg(key("r:1"))
        .arg(pick(&[9])[0].to_hex())
        .query(&mut c)
        .unwrap();
    let o = inspect_env(&url, NS, &["--check", "--recheck-delay", "0"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout(&o).contains("reverse-without-forward"));
    for o in [&o, &inspect_env(&url, NS, &[])] {
        let all = format!("{}{}", stdout(o), String::from_utf8_lossy(&o.stderr));
        assert!(!all.contains("insp-s3cret"), "the password leaked: {all}");
    }
    // A wrong password is an error (exit 2), and is not printed either.
    let bad = format!("redis://inspector:wr0ng-pw@127.0.0.1:{}", v.port);
    let o = inspect_env(&bad, NS, &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("wr0ng-pw") && err.contains("***"), "{err}");
}

#[tokio::test]
async fn tls_through_a_valkeys_url() {
    let tls = support::tls::TlsValkey::start();
    let v = &tls.valkey;
    let s = new_store(v, "r", long_ttls());
    heartbeat(&s, "w0", None).await;
    s.stored(M, "w0", &pick(&[1, 2])).await.unwrap();
    let url = tls.url();
    let run = |args: &[&str]| {
        support::router_command("inspect")
            .args(["--valkey", &url, "--key-prefix", NS])
            .args(args.iter().copied())
            .env("SSL_CERT_FILE", &tls.ca_file)
            .output()
            .unwrap()
    };
    let o = run(&["--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(worker(&json(&o)["models"][0], "w0")["blocks"], 2);
    assert_eq!(run(&["--check"]).status.code(), Some(0));
}
