//! `--check` names each hand-made corruption; tenant limits' keys pass
//! it and need a TTL.

use super::*;

fn codes(report: &Value) -> Vec<String> {
    report["shown"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v["code"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn bucket_key(h: &str) -> String {
    let b = u16::from_str_radix(&h[..4], 16).unwrap() & !7;
    key(&format!("f:{b:04x}"))
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Builds a small consistent fleet: w0 (confirmed blocks), w1 (speculative
/// ones); returns their incarnations.
async fn small_fleet(v: &Valkey) -> (u64, u64) {
    flush(v);
    let s = new_store(v, "router-a", long_ttls());
    let w0 = heartbeat(&s, "w0", None).await;
    let w1 = heartbeat(&s, "w1", None).await;
    s.router_lease(M, Duration::from_secs(600)).await.unwrap();
    s.stored(M, "w0", &pick(&[0, 1, 2, 3])).await.unwrap();
    s.assign(M, "w1", &pick(&[8, 9])).await.unwrap();
    (w0, w1)
}

#[tokio::test]
async fn each_corruption_fails_the_check_by_name() {
    let v = Valkey::start();
    let h = |i: usize| pick(&[i])[0].to_hex();
    let far = (now_s() + 10 * 86_400).to_string();
    type Corrupt = Box<dyn Fn(&Valkey, u64, u64)>;
    let cases: Vec<(&str, Corrupt)> = vec![
        (
            "forward-without-reverse",
            Box::new(move |v, w0, _| {
                let _: () = raw(
                    v,
                    &[
                        "HSET",
                        &bucket_key(&h(30)),
                        &h(30),
                        &format!("{w0}c{}", now_s() + 600),
                    ],
                );
            }),
        ),
        (
            "reverse-without-forward",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["SADD", &key(&format!("r:{w0}")), &h(31)]);
            }),
        ),
        (
            "entry-of-unknown-incarnation",
            Box::new(move |v, _, _| {
                let _: () = raw(v, &["HSET", &bucket_key(&h(32)), &h(32), "99c1"]);
                let _: () = raw(v, &["SADD", &key("r:99"), &h(32)]);
            }),
        ),
        (
            "keys-of-unknown-incarnation",
            Box::new(move |v, _, _| {
                let _: () = raw(v, &["SADD", &key("sp:98"), &h(33)]);
            }),
        ),
        (
            "missing-view-record",
            Box::new(|v, w0, _| {
                let _: () = raw(v, &["HDEL", &key("view"), &w0.to_string()]);
            }),
        ),
        (
            "stale-view-record",
            Box::new(|v, w0, _| {
                let _: () = raw(
                    v,
                    &["HSET", &key(&format!("w:{w0}")), "url", "http://elsewhere"],
                );
            }),
        ),
        (
            "unknown-key",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["SET", &key("junk"), "1"]);
            }),
        ),
        (
            "unknown-key",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["SET", &format!("{NS}:{M}:ids"), "no hash tag"]);
            }),
        ),
        (
            "speculative-not-in-sp",
            Box::new(move |v, _, w1| {
                let _: () = raw(v, &["SREM", &key(&format!("sp:{w1}")), &h(8)]);
            }),
        ),
        (
            "sp-member-not-speculative",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["SADD", &key(&format!("sp:{w0}")), &h(0)]);
            }),
        ),
        (
            "speculative-expiry-too-far",
            Box::new(move |v, _, w1| {
                let _: () = raw(
                    v,
                    &["HSET", &bucket_key(&h(9)), &h(9), &format!("{w1}s{far}")],
                );
            }),
        ),
        (
            "id-of-unknown-incarnation",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["HSET", &key("ids"), "ghost", "77"]);
            }),
        ),
        (
            "malformed-entry",
            Box::new(move |v, w0, _| {
                let _: () = raw(
                    v,
                    &["HSET", &bucket_key(&h(1)), &h(1), &format!("{w0}c,{w0}x")],
                );
            }),
        ),
        (
            // A tier letter the scripts never write (CPU is h, disk d).
            "malformed-entry",
            Box::new(move |v, w0, _| {
                let _: () = raw(
                    v,
                    &[
                        "HSET",
                        &bucket_key(&h(2)),
                        &h(2),
                        &format!("{w0}g{}", now_s() + 600),
                    ],
                );
            }),
        ),
        (
            "malformed-entry",
            Box::new(move |v, w0, _| {
                let exp = now_s() + 600;
                let _: () = raw(
                    v,
                    &[
                        "HSET",
                        &bucket_key(&h(3)),
                        &h(3),
                        &format!("{w0}h{exp},{w0}d{exp}"),
                    ],
                );
            }),
        ),
        (
            // The target's tiers outliving the sync they belong to.
            "sync-target-not-syncing",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["HSET", &key(&format!("st:{w0}")), &h(4), "h"]);
            }),
        ),
        (
            "stage-without-ttl",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["HSET", &key(&format!("stage_t:{w0}:s1")), &h(5), "d"]);
            }),
        ),
        (
            "wrong-type",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["SET", &key("purge"), "x"]);
            }),
        ),
        (
            "model-not-listed",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["SREM", &format!("{NS}:models"), M]);
            }),
        ),
        (
            "inflight-of-unknown-incarnation",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["HSET", &key("view"), "97:router-z", "2"]);
            }),
        ),
        (
            "inflight-of-unknown-incarnation",
            Box::new(|v, _, _| {
                let _: () = raw(v, &["HSET", &key("view"), "p97:router-z", "500"]);
            }),
        ),
        (
            "bad-view-field",
            Box::new(|v, w0, _| {
                let _: () = raw(v, &["HSET", &key("view"), &format!("p{w0}:router-a"), "-3"]);
            }),
        ),
        (
            "inflight-of-dead-router",
            Box::new(|v, w0, _| {
                let lease = (now_s() - 60) * 1000;
                let _: () = raw(
                    v,
                    &["ZADD", &key("routers"), &lease.to_string(), "router-old"],
                );
                let _: () = raw(v, &["HSET", &key("view"), &format!("{w0}:router-old"), "1"]);
            }),
        ),
        (
            "unexpected-ttl",
            Box::new(move |v, w0, _| {
                let _: () = raw(v, &["EXPIRE", &key(&format!("r:{w0}")), "3600"]);
            }),
        ),
    ];
    for (n, (want, corrupt)) in cases.iter().enumerate() {
        let (w0, w1) = small_fleet(&v).await;
        assert_clean(&v, "before corrupting");
        corrupt(&v, w0, w1);
        // The re-check path with a delay once; at once otherwise.
        let (code, report) = check(&v, if n == 0 { "50ms" } else { "0" });
        assert_eq!(code, 1, "{want}: {report:#}");
        assert!(
            codes(&report).iter().any(|c| c == want),
            "{want} not named in {report:#}"
        );
        assert_eq!(report["clean"], false);
    }
    // Human output names the violation and its invariant.
    small_fleet(&v).await;
    let _: () = raw(&v, &["HSET", &key("view"), "97:router-a", "2"]);
    let o = inspect(&v, &["--check", "--recheck-delay", "0"]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(
        text.contains("VIOLATION [4 inflight-of-unknown-incarnation]"),
        "{text}"
    );
    assert!(text.contains("FAILED: 1 violations"), "{text}");
}

#[tokio::test]
async fn tenant_limit_keys_pass_the_check_and_need_a_ttl() {
    let v = Valkey::start();
    let s = new_store(&v, "router-a", long_ttls());
    let gcra = state::Gcra {
        interval_us: 1_000_000,
        tolerance_us: 2_000_000,
    };
    let limits = state::LimitCheck {
        requests: Some(gcra),
        tokens: Some(gcra),
        cost: 1,
        max_concurrent: Some(3),
    };
    let tenant = "key:0123456789abcdef";
    s.limit_admit(tenant, &limits, false).await.unwrap();
    assert_clean(&v, "after an admission");
    let _: () = redis::cmd("PERSIST")
        .arg(format!("{NS}:tenant:{{{tenant}}}:cc"))
        .query(&mut v.conn())
        .unwrap();
    let (code, report) = check(&v, "0");
    assert_ne!(code, 0);
    assert!(
        codes(&report).contains(&"tenant-key-without-ttl".to_owned()),
        "{report:#}"
    );
}
