//! KV tiers end to end (issue 14's done-means), with real processes: a
//! router on a real valkey-server; workers holding a prompt on the CPU and
//! on the GPU, as explain shows them (the GPU holder wins at equal load, a
//! CPU hit still beats none); and a `sim-worker --cpu-blocks` whose GPU
//! evicts a prefix to its CPU tier, reported by its own push path and by a
//! `prefix-router reporter` reading its vLLM KV events over ZeroMQ: the
//! prefix stays routable as a CPU hit, and is a GPU hit again once loaded
//! back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use crate::support;

use crate::harness;

use std::collections::BTreeMap;
use std::time::Duration;

use harness::{MODEL, Sim, completion, prompt, tokenizer_dir};
use serde_json::{Value, json};
use support::reporter_process::Reporter;
use support::{Router, TOKEN, Valkey, args, free_port, http, post, raw_state};

/// A deadline for polling on 2 busy cores, not a latency bound.
const PATIENCE: Duration = Duration::from_secs(30);

async fn router(valkey: &Valkey) -> Router {
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = Some(Duration::from_secs(120));
    Router::start(&valkey.url(), a).await
}

/// The explain row of `worker`.
fn row<'a>(explained: &'a Value, worker: &str) -> &'a Value {
    explained["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["worker_id"] == worker)
        .unwrap_or_else(|| panic!("{worker} not in {explained:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_tiered_hits_and_the_gpu_holder_wins() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    for id in ["on-gpu", "on-cpu", "cold"] {
        let hb =
            json!({"worker_id": id, "url": format!("http://127.0.0.1:9/{id}"), "model": MODEL});
        assert_eq!(post(&r, "/internal/heartbeat", &hb).await.0, 200);
    }
    let body = json!({"model": MODEL, "prompt": prompt("tiers", 30), "max_tokens": 4});
    let (st, e) = post(&r, "/admin/explain", &body).await;
    assert_eq!(st, 200, "{e}");
    let hashes = e["block_hashes"].clone();
    let blocks = hashes.as_array().unwrap().len();
    assert!(blocks >= 8, "{e}");
    // The same prompt, held on the GPU by one worker and on the CPU by
    // another (its engine's label: any case, as vLLM's events spell it).
    let stored = |worker: &str, medium: Option<&str>| {
        let mut b = json!({"worker_id": worker, "model": MODEL, "block_hashes": hashes});
        if let Some(m) = medium {
            b["medium"] = m.into();
        }
        b
    };
    assert_eq!(
        post(&r, "/internal/stored", &stored("on-gpu", None))
            .await
            .0,
        200
    );
    assert_eq!(
        post(&r, "/internal/stored", &stored("on-cpu", Some("CPU")))
            .await
            .0,
        200
    );
    // A medium of the wrong type is refused whole, before any write.
    let mut bad = stored("cold", None);
    bad["medium"] = json!(3);
    let (st, err) = post(&r, "/internal/stored", &bad).await;
    assert_eq!(st, 400, "{err}");
    // So is a label the tier rule does not know (protocol::Tier::from_label).
    bad["medium"] = json!("weird");
    let (st, err) = post(&r, "/internal/stored", &bad).await;
    assert_eq!(st, 400, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tier \"weird\""),
        "{err}"
    );
    // So is a snapshot whose tiers do not match its hashes one for one, or
    // name a tier the rule does not know.
    let sync =
        json!({"worker_id": "cold", "model": MODEL, "active_hashes": hashes, "tiers": ["cpu"]});
    let (st, err) = post(&r, "/internal/sync", &sync).await;
    assert_eq!(st, 400, "{err}");
    let mut weird: Vec<&str> = vec!["gpu"; blocks];
    weird[1] = "weird";
    let sync =
        json!({"worker_id": "cold", "model": MODEL, "active_hashes": hashes, "tiers": weird});
    let (st, err) = post(&r, "/internal/sync", &sync).await;
    assert_eq!(st, 400, "{err}");
    let (_, e) = post(&r, "/admin/explain", &body).await;
    assert_eq!(
        row(&e, "cold")["matched_tokens"],
        0,
        "nothing written: {e:#}"
    );

    let (_, e) = post(&r, "/admin/explain", &body).await;
    let cached = (blocks * 16) as u64;
    let tiers = |w: &str| row(&e, w)["matched_tokens_by_tier"].clone();
    assert_eq!(
        tiers("on-gpu"),
        json!({"gpu": cached, "cpu": 0, "disk": 0}),
        "{e:#}"
    );
    assert_eq!(
        tiers("on-cpu"),
        json!({"gpu": 0, "cpu": cached, "disk": 0}),
        "{e:#}"
    );
    assert_eq!(
        tiers("cold"),
        json!({"gpu": 0, "cpu": 0, "disk": 0}),
        "{e:#}"
    );
    assert_eq!(
        row(&e, "on-cpu")["effective_cached_tokens"],
        cached as f64 * 0.5
    );
    assert_eq!(e["chosen"]["worker_id"], "on-gpu", "{e:#}");
    // Two of three hold the prompt, so the hotspot guard credits the cold
    // worker with the second best (tier-weighted) hit: it costs what the
    // CPU holder costs, and the real hit ranks first at equal cost.
    let score = |w: &str| row(&e, w)["score_tokens"].as_f64().unwrap();
    assert!(score("on-gpu") < score("on-cpu"), "{e:#}");
    assert!(score("on-cpu") <= score("cold"), "{e:#}");
    let rank = |w: &str| row(&e, w)["rank"].as_u64().unwrap();
    assert_eq!(
        (rank("on-gpu"), rank("on-cpu"), rank("cold")),
        (1, 2, 3),
        "{e:#}"
    );

    // The GPU holder drained: the CPU holder still beats a cold worker.
    let resp = http()
        .delete(r.url(&format!("/internal/workers/on-gpu?model={MODEL}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (_, e) = post(&r, "/admin/explain", &body).await;
    assert_eq!(e["chosen"]["worker_id"], "on-cpu", "{e:#}");
    let score = |w: &str| row(&e, w)["score_tokens"].as_f64().unwrap();
    assert!(score("on-cpu") < score("cold"), "{e:#}");
    assert!(
        e["chosen"]["reason"]
            .as_str()
            .unwrap()
            .contains("off the GPU"),
        "{e:#}"
    );
}

/// A small GPU pool with a CPU tier behind it; fast time.
const SIM_FLAGS: [&str; 6] = [
    "--num-blocks",
    "24",
    "--cpu-blocks",
    "64",
    "--time-scale",
    "0.02",
];

/// The tier letter of each entry `worker`'s live incarnation has.
fn fleet_tiers(valkey: &Valkey, worker: &str) -> BTreeMap<String, char> {
    let Ok(mut conn) = valkey.client().get_connection() else {
        return BTreeMap::new();
    };
    let idx: Option<String> = redis::cmd("HGET")
        .arg(format!("pr:{{{MODEL}}}:ids"))
        .arg(worker)
        .query(&mut conn)
        .unwrap_or(None);
    let Some(idx) = idx else {
        return BTreeMap::new();
    };
    raw_state(valkey, "pr", MODEL)
        .forward
        .into_iter()
        .filter_map(|(h, m)| m.get(&idx).map(|(k, _)| (h, *k)))
        .collect()
}

/// What the sim's cache says each indexed block's entry must be: `h` on
/// its CPU tier, `c` on its GPU.
async fn sim_tiers(sim: &Sim) -> BTreeMap<String, char> {
    let on_cpu = sim.cpu_cached().await;
    sim.indexed()
        .await
        .into_iter()
        .map(|h| {
            let k = if on_cpu.contains(&h) { 'h' } else { 'c' };
            (h, k)
        })
        .collect()
}

/// Waits until the fleet's entries for `worker` are the sim's, tiers
/// included; on timeout, says what differs.
async fn tiers_converged(
    valkey: &Valkey,
    worker: &str,
    sim: &Sim,
    what: &str,
) -> BTreeMap<String, char> {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let want = sim_tiers(sim).await;
        let got = fleet_tiers(valkey, worker);
        if got == want {
            return want;
        }
        if std::time::Instant::now() > deadline {
            let wrong: Vec<_> = want
                .iter()
                .filter(|(h, k)| got.get(*h) != Some(k))
                .collect();
            panic!(
                "{worker}: {what}: {} entries differ from the cache, e.g. {:?}",
                wrong.len(),
                wrong.first()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The prompt of `topic`, as a completion body for the router.
fn body(topic: &str) -> Value {
    let mut b = completion(&prompt(topic, 12), 2, false);
    b["model"] = MODEL.into();
    b
}

/// Fills `sim`'s GPU so that `first`'s prefix moves to the CPU tier, then
/// checks that the router sees it as a CPU hit, and a GPU hit again once
/// `first` is served (loaded back) on the worker.
async fn cpu_hit_after_gpu_eviction(valkey: &Valkey, r: &Router, sim: &Sim, worker: &str) {
    let first = "alpha";
    for topic in [first, "beta", "gamma", "delta", "epsilon"] {
        let resp = http()
            .post(sim.url("/v1/completions"))
            .json(&body(topic))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let tiers = tiers_converged(valkey, worker, sim, "after offloading").await;
    assert!(
        tiers.values().any(|k| *k == 'h'),
        "nothing reached the CPU tier: {tiers:?}"
    );
    let (_, e) = post(r, "/admin/explain", &body(first)).await;
    let by_tier = &row(&e, worker)["matched_tokens_by_tier"];
    assert!(
        by_tier["cpu"].as_u64().unwrap() > 0,
        "{first} is not a CPU hit: {e:#}"
    );
    assert_eq!(e["chosen"]["worker_id"], worker);
    // Served again, the prefix is loaded back onto the GPU and stored there.
    let resp = http()
        .post(sim.url("/v1/completions"))
        .json(&body(first))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    tiers_converged(valkey, worker, sim, "after the load back").await;
    let (_, e) = post(r, "/admin/explain", &body(first)).await;
    let by_tier = &row(&e, worker)["matched_tokens_by_tier"];
    assert_eq!(by_tier["cpu"], 0, "{e:#}");
    assert!(by_tier["gpu"].as_u64().unwrap() > 0, "{e:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_the_gpu_evicted_to_the_cpu_stays_a_cpu_hit_by_push() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let mut flags = SIM_FLAGS.to_vec();
    flags.extend(["--sync-interval", "2s"]);
    let sim = Sim::pushing("pushing", &r.url(""), TOKEN, &flags).await;
    cpu_hit_after_gpu_eviction(&valkey, &r, &sim, "pushing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_the_gpu_evicted_to_the_cpu_stays_a_cpu_hit_by_reporter() {
    let valkey = Valkey::start();
    let r = router(&valkey).await;
    let ports = (free_port().unwrap(), free_port().unwrap());
    let sim = Sim::engine("engine", ports, &SIM_FLAGS).await;
    let _reporter = Reporter::start("engine", MODEL, &sim.base, &r, ports);
    cpu_hit_after_gpu_eviction(&valkey, &r, &sim, "engine").await;
}
