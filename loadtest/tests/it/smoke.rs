//! One short end-to-end run: a tiny fleet (Valkey, one router on one async
//! thread behind the builtin balancer, two sim-workers) serves ~20 RAG
//! requests; every one succeeds, the workers report cache hits, and the
//! report is written.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::time::Duration;

use indicatif::{MultiProgress, ProgressDrawTarget};
use loadtest::machine::Machine;
use loadtest::report::{self, RunReport, ScenarioReport};
use loadtest::scenario::Scenario;
use loadtest::topology::Arm;
use loadtest::workload::{Api, SyntheticKind, SyntheticOptions, synthetic_plan};

use crate::common;
use common::tiny_runner;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_fleet_serves_a_short_workload() {
    let out = tempfile::tempdir().expect("tempdir");
    let plan = synthetic_plan(&SyntheticOptions {
        kind: SyntheticKind::Rag,
        api: Api::Completions,
        rate: 10.0,
        duration: None,
        requests: Some(20),
        seed: 7,
        output_tokens: 4,
        documents: 3,
        doc_words: 200,
        zipf: 1.0,
        question_words: 8,
        system_words: 0,
        turns: 1,
        think_time: Duration::ZERO,
    })
    .expect("plan");
    assert_eq!(plan.requests(), 20);
    let arm = Arm::parse("cache_aware:1", 1, Duration::from_secs(60), &[]).expect("arm");
    let mut runner = tiny_runner(out.path(), &arm, 2, 5);
    // The router relays its streams on a single async thread here; the
    // other tests run the default (one per core).
    runner
        .base
        .routers
        .extra_args
        .extend(["--async-threads".into(), "1".into()]);
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        runner.run_arm(Scenario::Steady, &arm, &plan, &multi),
    )
    .await
    .expect("the run took over 60 s")
    .expect("run");
    let s = &result.summary;
    assert_eq!((s.requests, s.failed), (20, 0), "{:?}", s.errors);
    let hit = s.hit_rate.expect("cached tokens reported");
    assert!(hit > 0.2, "hit rate {hit}: 3 documents over 20 requests");
    assert!(s.ttft_ms.is_some() && s.e2e_ms.is_some());
    assert_eq!(s.per_worker_tokens.len(), 2);
    assert!(result.overhead.is_some());
    let report = RunReport {
        command: "smoke".into(),
        date: "now".into(),
        machine: Machine::detect(),
        workload: plan.description.clone(),
        settings: vec![],
        scenarios: vec![ScenarioReport {
            scenario: Scenario::Steady,
            arms: vec![result],
        }],
    };
    let path = report::write(&report, out.path(), 1.0).expect("report");
    let md = std::fs::read_to_string(path).expect("report.md");
    assert!(md.contains("| cache_aware ×1 | 1 | 20 | 0 |"), "{md}");
    assert!(out.path().join("hit_rate_steady.svg").is_file());
    assert!(
        out.path()
            .join("logs/steady/cache_aware-1/samples.jsonl")
            .is_file()
    );
}
