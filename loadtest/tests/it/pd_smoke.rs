//! `loadtest pd`'s arms on a tiny real fleet (Valkey, one router behind the
//! builtin balancer, one prefill and one decode sim-worker): short chat
//! sessions are served disaggregated, later turns skip the prefill unless
//! the arm never skips, and each role's counters come from the sims and
//! the router themselves.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::time::Duration;

use indicatif::{MultiProgress, ProgressDrawTarget};
use loadtest::pd::pd_arm;
use loadtest::report::pd_table;
use loadtest::scenario::Scenario;
use loadtest::workload::{Api, SyntheticKind, SyntheticOptions, synthetic_plan};

use crate::common;
use common::tiny_runner;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_turns_are_disaggregated_then_skip_the_prefill() {
    let out = tempfile::tempdir().expect("tempdir");
    let plan = synthetic_plan(&SyntheticOptions {
        kind: SyntheticKind::Chat,
        api: Api::Chat,
        rate: 6.0,
        duration: None,
        requests: Some(12),
        seed: 3,
        output_tokens: 4,
        documents: 1,
        doc_words: 300,
        zipf: 1.0,
        question_words: 8,
        system_words: 0,
        turns: 3,
        think_time: Duration::from_millis(100),
    })
    .expect("plan");
    assert_eq!(plan.requests(), 12);
    let pd = pd_arm("pd", 1, 1, 1).expect("arm");
    let runner = tiny_runner(out.path(), &pd, 3, 3);
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
    let mut results = Vec::new();
    for arm in [pd, pd_arm("pd-noskip", 1, 1, 1).expect("arm")] {
        let result = tokio::time::timeout(
            Duration::from_secs(90),
            runner.run_arm(Scenario::Steady, &arm, &plan, &multi),
        )
        .await
        .expect("the run took over 90 s")
        .expect("run");
        let s = &result.summary;
        assert_eq!((s.requests, s.failed), (12, 0), "{:?}", s.errors);
        assert_eq!(s.per_worker_tokens.len(), 2, "two sims, not three");
        assert!(s.tpot_ms.is_some());
        let turns = result.by_turn.as_ref().expect("turns");
        assert_eq!((turns.first.requests, turns.later.requests), (4, 8));
        let c = result.counters.as_ref().expect("counters");
        let roles: Vec<&str> = c.roles.iter().map(|r| r.role.as_str()).collect();
        assert_eq!(roles, ["prefill", "decode"]);
        let total: u64 = c.pd_paths.values().sum();
        assert_eq!(total, 12, "every workload request, no calibration: {c:?}");
        results.push(result);
    }
    // Later turns: the decode worker holds the conversation, and skips the
    // prefill worker; never skipping, the prefill worker serves each turn
    // from its cache and hands the KV over.
    let skip = results[0].counters.as_ref().unwrap();
    assert_eq!(skip.pd_paths["skip_prefill"], 8, "{skip:?}");
    assert_eq!(skip.pd_paths["disaggregated"], 4, "{skip:?}");
    let never = results[1].counters.as_ref().unwrap();
    assert_eq!(never.pd_paths["skip_prefill"], 0, "{never:?}");
    assert_eq!(never.pd_paths["disaggregated"], 12, "{never:?}");
    let prefill = &never.roles[0];
    assert_eq!(prefill.handoffs, 12, "{prefill:?}");
    assert!(prefill.hit_rate().unwrap() > 0.3, "{prefill:?}");
    assert_eq!(never.roles[1].remote_prefills, 12, "{never:?}");
    let table = pd_table(&results);
    assert!(table.contains("| pd (1P+1D) ×1 | 12 | 0 |"), "{table}");
}
