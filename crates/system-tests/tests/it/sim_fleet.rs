//! `sim-worker` reporting through the push API to a real router on a real
//! valkey-server: its blocks appear in the shared state, hits come back,
//! evictions follow, syncs heal lost reports, silence ends the lease.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use super::harness::{MODEL, Sim, completion, eventually, prompt, tokenizer_dir};
use crate::support::{Router, TOKEN, Valkey, args, http};

/// A valkey-server and an in-process router that tokenizes like the sims.
struct Fleet {
    valkey: Valkey,
    router: Router,
}

async fn fleet(worker_lease: Option<Duration>) -> Fleet {
    let valkey = Valkey::start();
    let mut a = args();
    a.model = Some(MODEL.into());
    a.tokenizer_dir = Some(tokenizer_dir());
    a.worker_lease = worker_lease;
    let router = Router::start(&valkey.url(), a).await;
    Fleet { valkey, router }
}

impl Fleet {
    /// A sim reporting to this fleet as `worker_id`.
    async fn sim(&self, worker_id: &str, extra: &[&str]) -> Sim {
        let mut flags = vec!["--time-scale", "0.02"];
        flags.extend_from_slice(extra);
        Sim::pushing(worker_id, &self.router.url(""), TOKEN, &flags).await
    }

    /// The hashes the shared state holds for `worker`'s live incarnation.
    fn blocks(&self, worker: &str) -> BTreeSet<String> {
        crate::support::worker_blocks(&self.valkey, "pr", MODEL, worker)
    }

    /// `worker`'s row of `/admin/workers`, if listed as live.
    async fn live(&self, worker: &str) -> Option<Value> {
        let resp = http()
            .get(self.router.url("/admin/workers"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .ok()?;
        let all: Value = resp.json().await.ok()?;
        all["workers"]
            .as_array()?
            .iter()
            .find(|w| w["worker_id"] == worker && w["status"] == "live")
            .cloned()
    }

    /// Sends a completion through the router; returns the serving worker,
    /// the sim's cached-token header and the body.
    async fn route(&self, prompt: &str) -> (String, u64, Value) {
        let resp = http()
            .post(self.router.url("/v1/completions"))
            .json(&completion(prompt, 4, false))
            .send()
            .await
            .expect("route");
        assert_eq!(resp.status(), 200);
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let worker = header("x-prefix-router-worker");
        let cached = header("x-sim-cached-tokens")
            .parse()
            .expect("cached header");
        (worker, cached, resp.json().await.expect("body"))
    }

    /// Waits until the shared state holds exactly what `sim` caches.
    async fn converged(&self, sim: &Sim, worker: &str) -> BTreeSet<String> {
        eventually("the shared state to match the sim's cache", || async {
            let cached = sim.indexed().await;
            (self.blocks(worker) == cached).then_some(cached)
        })
        .await
    }
}

async fn pusher(sim: &Sim) -> Value {
    sim.state().await["pusher"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_reach_the_shared_state_and_evictions_follow() {
    let f = fleet(None).await;
    let sim = f
        .sim("sim-a", &["--num-blocks", "48", "--sync-interval", "1h"])
        .await;
    eventually("sim-a registered", || f.live("sim-a")).await;

    let first = prompt("alpha", 20);
    let (worker, cached, _) = f.route(&first).await;
    assert_eq!((worker.as_str(), cached), ("sim-a", 0));
    // The shared index holds the prompt's anchors and its last block.
    let held = f.converged(&sim, "sim-a").await;
    assert!(!held.is_empty(), "{} blocks", held.len());

    // The same prompt again: a prefix-cache hit, reported both ways.
    let (_, cached, body) = f.route(&first).await;
    assert!(cached > 0);
    assert_eq!(
        body["usage"]["prompt_tokens_details"]["cached_tokens"],
        cached
    );
    // And every router sees the blocks: the explain lookup matches them all.
    let explained: Value = http()
        .post(f.router.url("/admin/explain"))
        .bearer_auth(TOKEN)
        .json(&completion(&first, 4, false))
        .send()
        .await
        .expect("explain")
        .json()
        .await
        .expect("explain JSON");
    let blocks = explained["block_hashes"].as_array().expect("hashes").len();
    let row = &explained["candidates"][0];
    assert_eq!(
        (&row["worker_id"], &row["matched_blocks"]),
        (&json!("sim-a"), &json!(blocks))
    );

    // Other prompts evict the first one's blocks (48 blocks hold ~3 prompts).
    for topic in ["beta", "gamma", "delta", "epsilon"] {
        f.route(&prompt(topic, 20)).await;
    }
    assert!(sim.state().await["cache"]["evictions"].as_u64() > Some(0));
    let now = f.converged(&sim, "sim-a").await;
    assert!(held.iter().any(|h| !now.contains(h)), "nothing evicted");
    // Through the 100 ms eviction reports: the only sync was the first one.
    let status = pusher(&sim).await;
    assert_eq!(status["syncs"], 1, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_eviction_report_is_healed_by_a_sync() {
    let f = fleet(None).await;
    let sim = f
        .sim("sim-b", &["--num-blocks", "48", "--sync-interval", "1h"])
        .await;
    eventually("sim-b registered", || f.live("sim-b")).await;
    let faults = sim.faults(json!({"drop_evictions": 1.0})).await;
    assert_eq!(faults["drop_evictions"], 1.0);

    for topic in ["one", "two", "three", "four", "five"] {
        f.route(&prompt(topic, 20)).await;
    }
    // Stores are reported, evictions are not: the state keeps stale blocks.
    let stale = eventually("stale blocks in the shared state", || async {
        let (cached, held) = (sim.indexed().await, f.blocks("sim-b"));
        (cached.is_subset(&held) && held.len() > cached.len()).then(|| held.len() - cached.len())
    })
    .await;
    assert!(pusher(&sim).await["dropped_evictions"].as_u64() >= Some(stale as u64));
    // Flushes do not heal it...
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(f.blocks("sim-b").len() > sim.indexed().await.len());
    // ...a full snapshot does.
    let resp = http()
        .post(sim.url("/sim/resync"))
        .send()
        .await
        .expect("resync");
    assert_eq!(resp.status(), 202);
    f.converged(&sim, "sim-b").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_sync_heals_lost_evictions_by_itself() {
    let f = fleet(None).await;
    let sim = f
        .sim(
            "sim-c",
            &[
                "--num-blocks",
                "48",
                "--sync-interval",
                "1s",
                "--drop-evictions",
                "1",
            ],
        )
        .await;
    eventually("sim-c registered", || f.live("sim-c")).await;
    for topic in ["red", "green", "blue", "cyan", "magenta"] {
        f.route(&prompt(topic, 20)).await;
    }
    let status = pusher(&sim).await;
    assert!(status["dropped_evictions"].as_u64() > Some(0), "{status}");
    // No eviction was ever reported, yet the state converges: the periodic
    // check finds the buckets of the lost evictions and repairs those alone.
    f.converged(&sim, "sim-c").await;
    let status = pusher(&sim).await;
    assert!(status["syncs"].as_u64() >= Some(2), "{status}");
    eventually("a repair", || async {
        let status = pusher(&sim).await;
        (status["repairs"].as_u64() > Some(0)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_worker_loses_its_lease_and_resyncs_when_back() {
    let f = fleet(Some(Duration::from_secs(2))).await;
    let sim = f.sim("sim-d", &[]).await;
    let before = eventually("sim-d registered", || f.live("sim-d")).await;
    f.route(&prompt("lease", 10)).await;
    f.converged(&sim, "sim-d").await;

    sim.faults(json!({"stop_reporting": true})).await;
    eventually("sim-d's lease to run out", || async {
        f.live("sim-d").await.is_none().then_some(())
    })
    .await;
    // With no live worker at all, a router keeps trying the workers it saw
    // live for one more lease (the state may have restarted empty); after
    // that, requests are not routed to it any more.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let resp = http()
        .post(f.router.url("/v1/completions"))
        .json(&completion("anyone there?", 1, false))
        .send()
        .await
        .expect("route");
    assert!(resp.status().is_client_error() || resp.status().is_server_error());

    sim.faults(json!({"stop_reporting": false})).await;
    let after = eventually("sim-d registered again", || f.live("sim-d")).await;
    assert!(after["incarnation"].as_u64() > before["incarnation"].as_u64());
    // The new incarnation gets the cache back from a full snapshot.
    let held = f.converged(&sim, "sim-d").await;
    assert!(!held.is_empty());
}
