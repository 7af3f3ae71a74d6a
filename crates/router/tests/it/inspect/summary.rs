//! The summary: workers, blocks, loads and backlogs as the scripts
//! built them; a model filter and a second namespace.

use super::*;

/// The state of the summary test: two live workers, one draining, a
/// router with requests in flight, a sync in progress.
async fn build_fleet(v: &Valkey) -> (u64, u64, u64) {
    let s = new_store(v, "router-a", long_ttls());
    let load = WorkerLoad {
        num_requests_waiting: 3,
        num_requests_running: 1,
        kv_cache_usage_perc: 0.5,
    };
    let w0 = heartbeat(&s, "w0", Some(load)).await;
    let w1 = heartbeat(&s, "w1", None).await;
    let w2 = heartbeat(&s, "w2", None).await;
    s.router_lease(M, Duration::from_secs(600)).await.unwrap();
    s.stored(M, "w0", &pick(&(0..5).collect::<Vec<_>>()))
        .await
        .unwrap();
    s.assign(M, "w1", &pick(&[10, 11, 12])).await.unwrap();
    s.stored(M, "w2", &pick(&(20..30).collect::<Vec<_>>()))
        .await
        .unwrap();
    s.deregister(M, "w2").await.unwrap();
    partial_sync(&v.client(), &s, "w0", &pick(&[0, 1, 40, 41]), 0).await;
    (w0, w1, w2)
}

#[tokio::test]
async fn the_summary_reports_workers_blocks_loads_and_backlogs() {
    let v = Valkey::start();
    let (w0, w1, w2) = build_fleet(&v).await;
    let o = inspect(&v, &["--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&o);
    assert_eq!(s["namespace"], NS);
    assert_eq!(s["unknown_keys"], 0);
    let m = &s["models"][0];
    assert_eq!(m["model"], M);
    assert_eq!(m["listed"], true);
    assert_eq!(m["seq"], 3);
    let a = worker(m, "w0");
    assert_eq!(a["incarnation"], w0);
    assert_eq!(a["status"], "live");
    assert_eq!(a["url"], "http://10.0.0.1:8000/w0");
    assert_eq!(
        a["blocks"], 5,
        "the patch has not added 40 and 41 yet: {a:#}"
    );
    assert_eq!(a["speculative"], 0);
    assert_eq!(a["load"]["waiting"], 3);
    assert_eq!(a["load"]["running"], 1);
    assert_eq!(a["load"]["kv_usage"], 0.5);
    assert!(a["load"]["age_ms"].as_i64().unwrap() >= 0);
    assert!(a["lease_left_ms"].as_i64().unwrap() > 500_000);
    assert_eq!(a["syncing"], true);
    let b = worker(m, "w1");
    assert_eq!(
        (b["incarnation"].as_u64(), b["blocks"].as_u64()),
        (Some(w1), Some(3))
    );
    assert_eq!(b["speculative"], 3);
    assert_eq!(b["load"]["waiting"], Value::Null);
    assert_eq!(b["in_flight"]["router-a"], 1);
    assert_eq!(b["in_flight_counted"], 1);
    let c = worker(m, "w2");
    assert_eq!(
        (c["incarnation"].as_u64(), c["status"].as_str()),
        (Some(w2), Some("draining"))
    );
    assert_eq!(c["blocks"], 10);
    assert_eq!(m["routers"][0]["router_id"], "router-a");
    assert_eq!(m["routers"][0]["live"], true);
    assert_eq!(m["routers"][0]["in_flight"], 1);
    assert_eq!(m["forward"]["entries"], 18);
    assert_eq!(m["forward"]["hashes"], 18);
    assert!(m["forward"]["buckets"].as_u64().unwrap() >= 2);
    assert_eq!(m["purge"]["incarnations"], serde_json::json!([w2]));
    assert_eq!(m["purge"]["entries_left"], 10);
    let sync = &m["syncs"][0];
    assert_eq!(
        (sync["worker_id"].as_str(), sync["phase"].as_str()),
        (Some("w0"), Some("add"))
    );
    assert_eq!(sync["target"], 4);
    // The same as tables; and the state is consistent mid-sync, mid-purge.
    let text = stdout(&inspect(&v, &[]));
    for needle in [
        "model Qwen/Qwen3-8B",
        "w0",
        "draining",
        "router-a=1 (1 counted)",
        "forward map",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    assert_clean(&v, "the summary's fleet");
    let text = stdout(&inspect(&v, &["--check"]));
    assert!(text.contains("OK: no violations"), "{text}");
}

#[tokio::test]
async fn model_filter_and_a_second_namespace() {
    let v = Valkey::start();
    build_fleet(&v).await;
    let mut settings = ConnectionSettings::new(&v.url());
    settings.hot_timeout = Duration::from_secs(2);
    let other = StateStore::new(settings, "other", "r", long_ttls(), tiny_limits()).unwrap();
    let hb = WorkerHeartbeat {
        worker_id: "x".into(),
        url: "http://h:1".into(),
        load: None,
    };
    other.heartbeat("m*[2]", &hb).await.unwrap();
    let s = json(&inspect(&v, &["--json", "--model", M]));
    assert_eq!(s["models"].as_array().map(Vec::len), Some(1));
    let s = json(&inspect_env(&v.url(), "other", &["--json"]));
    let names: Vec<&str> = s["models"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["model"].as_str())
        .collect();
    assert_eq!(
        names,
        ["m*[2]"],
        "other namespace, glob characters in the model name"
    );
    let o = inspect_env(
        &v.url(),
        "other",
        &["--check", "--json", "--model", "m*[2]"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(json(&o)["stats"]["models"], 1);
}
