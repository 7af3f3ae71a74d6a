//! One short end-to-end run: a tiny fleet (Valkey, one router behind the
//! builtin balancer, two sim-workers) serves ~20 RAG requests; every one
//! succeeds, the workers report cache hits, and the report is written.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::time::Duration;

use fleet::binaries::which;
use indicatif::{MultiProgress, ProgressDrawTarget};
use loadtest::drive::DriveOptions;
use loadtest::fleet::{
    Arm, BalancerKind, FleetSpec, RouterCommon, SimSettings, default_tokenizer_dir,
};
use loadtest::machine::Machine;
use loadtest::report::{self, RunReport, ScenarioReport};
use loadtest::runner::Runner;
use loadtest::scenario::{EventSettings, Scenario};
use loadtest::workload::{Api, SyntheticKind, SyntheticOptions, synthetic_plan};

mod common;
use common::binaries;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_fleet_serves_a_short_workload() {
    let bins = binaries();
    let valkey = which("valkey-server").expect("valkey-server (run scripts/install-deps.sh)");
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
    let runner = Runner {
        base: FleetSpec {
            arm: arm.clone(),
            routers: RouterCommon {
                program: bins.router,
                token: "smoke-token".into(),
                extra_args: vec![],
                log_level: "warn".into(),
            },
            sim_program: bins.sim,
            sims: SimSettings {
                count: 2,
                num_blocks: 2048,
                time_scale: 0.05,
                max_num_seqs: 64,
                extra_args: vec![],
            },
            valkey_program: valkey,
            valkey_aof: false,
            valkey_cluster: false,
            balancer: BalancerKind::Builtin,
            model: "qwen3".into(),
            tokenizer_dir: default_tokenizer_dir(),
            dir: out.path().join("logs"),
        },
        drive: DriveOptions {
            model: "qwen3".into(),
            stream: true,
        },
        request_timeout: Duration::from_secs(20),
        calibration_pairs: 5,
        window_s: 1.0,
        event_at: 0.5,
        event: EventSettings {
            down_for: Duration::ZERO,
            valkey_keeps_data: false,
        },
        out_dir: out.path().to_owned(),
    };
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
