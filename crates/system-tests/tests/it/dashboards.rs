//! The Grafana dashboard (`deploy/grafana/prefix-router.json`) and the
//! Prometheus alert rules (`deploy/prometheus/alerts.yml`): well formed,
//! and every metric they use is one the fleet exports. Each name must be
//! recorded by the code (a `counter!`/`gauge!`/`histogram!` literal in
//! `crates/`), and a real fleet (Valkey, a router, a vLLM-like engine with
//! a `prefix-router reporter` beside it) must show it on a `/metrics` page
//! after some traffic, unless it only appears on a failure (listed below).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use crate::harness;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{MODEL, Sim, completion, prompt, tokenizer_dir};
use serde_json::Value;
use support::reporter_process::Reporter;
use support::{Router, Valkey, args, free_port, http, metrics_text};

/// Metrics recorded only when something fails, with the reason they are
/// absent from a healthy fleet's pages.
const FAILURE_ONLY: [&str; 4] = [
    "prefix_router_script_reloads_total", // Valkey lost its functions
    "prefix_router_push_failures_total",  // a report was not delivered
    "prefix_router_kv_events_undecodable_total", // an engine's frame
    "prefix_router_kv_events_unknown_total", // a newer engine's fields
];

/// Metrics only `prefix-router epp` records; tests/it/epp/ finds them on a
/// picker's page.
const EPP_ONLY: [&str; 3] = [
    "prefix_router_epp_picks_total",
    "prefix_router_engine_prompt_tokens_total",
    "prefix_router_engine_cached_tokens_total",
];

/// Metrics only a router with flow control records, most of them only
/// while its workers are saturated; tests/it/flow_control/ finds them on
/// such a router's page.
const FLOW_ONLY: [&str; 7] = [
    "prefix_router_flow_waiting",
    "prefix_router_flow_queued_total",
    "prefix_router_flow_fleet_waiting",
    "prefix_router_flow_saturated",
    "prefix_router_flow_wait_seconds",
    "prefix_router_flow_admitted_total",
    "prefix_router_flow_shed_total",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `prefix_router_*` name in `expr`, without a histogram's suffix.
fn names_in(expr: &str, out: &mut BTreeSet<String>) {
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("prefix_router_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let name = &expr[start..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        out.insert(base.to_owned());
        i = end;
    }
}

fn balanced(expr: &str) -> bool {
    let mut depth = 0i32;
    for c in expr.chars() {
        match c {
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return false;
        }
    }
    depth == 0
}

/// The dashboard's expressions, after checking its shape.
fn dashboard_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/grafana/prefix-router.json")).unwrap();
    let d: Value = serde_json::from_str(&text).unwrap();
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let mut ids = BTreeSet::new();
    let mut exprs = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
        let g = &p["gridPos"];
        assert!(g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24);
        if p["type"] == "row" {
            continue;
        }
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()));
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        let refs: BTreeSet<&str> = targets
            .iter()
            .map(|t| t["refId"].as_str().unwrap())
            .collect();
        assert_eq!(refs.len(), targets.len());
        for t in targets {
            let e = t["expr"].as_str().unwrap();
            assert!(balanced(e), "unbalanced: {e}");
            // The routers render histograms as summaries (quantile series,
            // no buckets): a `_bucket` query would find nothing.
            assert!(!e.contains("_bucket"), "no bucket series exist: {e}");
            exprs.push(e.to_owned());
        }
    }
    assert!(exprs.len() >= 15);
    exprs
}

/// The rules' expressions, after checking their shape.
fn rule_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let y: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let y = serde_json::to_value(&y).unwrap();
    let mut names = BTreeSet::new();
    let mut exprs = Vec::new();
    for group in y["groups"].as_array().unwrap() {
        for r in group["rules"].as_array().unwrap() {
            let alert = r["alert"].as_str().unwrap();
            assert!(names.insert(alert.to_owned()), "duplicate alert {alert}");
            let e = r["expr"].as_str().unwrap();
            assert!(balanced(e), "{alert}: unbalanced {e}");
            if let Some(f) = r.get("for") {
                let f = f.as_str().unwrap();
                let unit = f.trim_start_matches(|c: char| c.is_ascii_digit());
                assert!(
                    unit.len() < f.len() && ["s", "m", "h", "d"].contains(&unit),
                    "{alert}: for {f}"
                );
            }
            assert!(["warning", "critical"].contains(&r["labels"]["severity"].as_str().unwrap()));
            assert!(r["annotations"]["summary"].as_str().is_some());
            exprs.push(e.to_owned());
        }
    }
    assert!(exprs.len() >= 10);
    exprs
}

/// Names recorded by a metrics macro somewhere in `crates/`.
fn recorded_in_code() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![repo().join("crates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for mac in ["counter!(", "gauge!(", "histogram!("] {
                    for (at, _) in text.match_indices(mac) {
                        let rest = text[at + mac.len()..].trim_start();
                        if let Some(lit) = rest.strip_prefix('"') {
                            let name: String = lit.chars().take_while(|c| *c != '"').collect();
                            out.insert(name);
                        }
                    }
                }
                // Names passed to the macros through a list (zeroed at start).
                if text.contains("counter!(name)") {
                    names_in(&text, &mut out);
                }
            }
        }
    }
    out
}

fn reporter(engine: &Sim, router: &Router, metrics_port: u16) -> Reporter {
    let port = |url: &str| url.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let kv = port(engine.kv.as_deref().unwrap());
    let replay = port(engine.kv_replay.as_deref().unwrap());
    let spec = Reporter::spec("engine-0", MODEL, &engine.base, router, (kv, replay)).args([
        "--metrics-listen",
        &format!("127.0.0.1:{metrics_port}"),
        "--flush-interval",
        "50ms",
    ]);
    Reporter::from_spec(&spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_rules_use_is_exported() {
    let mut used = BTreeSet::new();
    for e in dashboard_exprs().iter().chain(&rule_exprs()) {
        names_in(e, &mut used);
    }
    let recorded = recorded_in_code();
    let unknown: Vec<&String> = used.iter().filter(|n| !recorded.contains(*n)).collect();
    assert!(unknown.is_empty(), "used but never recorded: {unknown:?}");

    // A fleet, with traffic through the router to a reported engine.
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    // With the response cache on, as its panel needs.
    a.response_cache.response_cache_ttl = Some(Duration::from_secs(60));
    let router = Router::start(&valkey.url(), a).await;
    let engine = Sim::engine("engine-0", (0, 0), &[]).await;
    let metrics_port = free_port().unwrap();
    let rep = reporter(&engine, &router, metrics_port);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut pages = String::new();
    let mut missing: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        let resp = http()
            .post(router.url("/v1/completions"))
            .json(&completion(&prompt("dashboards", 8), 2, false))
            .send()
            .await
            .unwrap();
        let _ = resp.bytes().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let reporter_page = http()
            .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .send()
            .await;
        let reporter_page = match reporter_page {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        pages = format!("{}\n{reporter_page}", metrics_text(&router).await);
        missing = used
            .iter()
            .filter(|n| {
                !FAILURE_ONLY.contains(&n.as_str())
                    && !EPP_ONLY.contains(&n.as_str())
                    && !FLOW_ONLY.contains(&n.as_str())
            })
            .filter(|n| !pages.lines().any(|l| l.starts_with(n.as_str())))
            .cloned()
            .collect();
        if missing.is_empty() {
            break;
        }
    }
    drop(rep);
    assert!(missing.is_empty(), "not on any /metrics page: {missing:?}");
    // The per-worker gauges name the worker.
    assert!(
        pages
            .lines()
            .any(|l| l.starts_with("prefix_router_worker_in_flight{")
                && l.contains("worker=\"engine-0\"")),
        "no per-worker gauge for engine-0"
    );
}
