//! `sim-worker`'s vLLM KV events: they decode, carry the blocks' tokens,
//! and replaying the whole stream from an empty set gives exactly the
//! sim's cached set.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use protocol::hashing::{BlockHasher, ExtraKeys, HashSeed};
use protocol::kv_events::{EngineHash, KvEvent, KvEventBatch};
use tokio::time::timeout;
use worker::kv_events::{KvEventSubscriber, KvEventSubscriberConfig, ReplayOptions, replay_from};

use super::harness::{PATIENCE, Sim, completion, eventually, prompt};

fn hex(h: &EngineHash) -> String {
    h.to_block_hash().to_hex()
}

/// Applies `batch` to `set` strictly: a stored hash must be new, a removed
/// one present.
fn apply(set: &mut BTreeSet<String>, batch: &KvEventBatch) -> Result<(), String> {
    for event in &batch.events {
        match event {
            KvEvent::BlockStored(s) => {
                for h in &s.block_hashes {
                    if !set.insert(hex(h)) {
                        return Err(format!("{} stored twice", hex(h)));
                    }
                }
            }
            KvEvent::BlockRemoved(r) => {
                for h in &r.block_hashes {
                    if !set.remove(&hex(h)) {
                        return Err(format!("{} removed while absent", hex(h)));
                    }
                }
            }
            KvEvent::AllBlocksCleared => set.clear(),
            KvEvent::Unknown(u) => return Err(format!("unknown event {}", u.tag)),
        }
    }
    Ok(())
}

/// Checks what vLLM would send: block size, tokens per block, and (for a
/// chain's first blocks) hashes that the tokens hash to.
fn check_shapes(batch: &KvEventBatch, hasher: &BlockHasher) {
    assert_eq!(batch.data_parallel_rank, Some(0));
    for event in &batch.events {
        let KvEvent::BlockStored(s) = event else {
            continue;
        };
        assert_eq!(s.block_size, 16);
        assert_eq!(s.token_ids.len(), 16 * s.block_hashes.len());
        assert_eq!(s.medium.as_deref(), Some("GPU"));
        assert!(
            s.block_hashes
                .iter()
                .all(|h| matches!(h, EngineHash::Int(_)))
        );
        if s.parent_block_hash.is_none() {
            let want = hasher.block_hashes(&s.token_ids, &ExtraKeys::default());
            let got: Vec<_> = s
                .block_hashes
                .iter()
                .map(EngineHash::to_block_hash)
                .collect();
            assert_eq!(got, want, "tokens do not hash to the event's hashes");
        }
    }
}

async fn send(sim: &Sim, prompt: &str) {
    let resp = reqwest::Client::new()
        .post(sim.url("/v1/completions"))
        .json(&completion(prompt, 8, false))
        .send()
        .await
        .expect("completion");
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_events_replay_to_exactly_the_cached_set() {
    let sim = Sim::start(&[
        "--num-blocks",
        "40",
        "--time-scale",
        "0.02",
        "--kv-events-endpoint",
        "tcp://127.0.0.1:0",
        "--kv-events-replay-endpoint",
        "tcp://127.0.0.1:0",
    ])
    .await;
    let hasher = BlockHasher::new(16, &HashSeed::from_env_value(None)).expect("hasher");
    let endpoint = sim.kv.clone().expect("kv endpoint");
    let mut sub = KvEventSubscriber::start(KvEventSubscriberConfig::new(endpoint))
        .await
        .expect("subscriber");
    // Until the subscription is in place, PUB drops what it sends.
    let mut live = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    let mut tries = 0;
    while live.is_empty() {
        tries += 1;
        assert!(
            Instant::now() < deadline,
            "the subscriber never received a batch"
        );
        send(&sim, &prompt(&format!("warm-up {tries}"), 2)).await;
        if let Ok(got) = timeout(Duration::from_millis(200), sub.recv()).await {
            live.push(got.expect("decodes"));
        }
    }

    // Hits, evictions (40 blocks hold two of these prompts), a reset.
    for topic in ["north", "south", "north", "east", "west"] {
        send(&sim, &prompt(topic, 20)).await;
    }
    let reset = reqwest::Client::new()
        .post(sim.url("/sim/reset_prefix_cache"))
        .send()
        .await
        .expect("reset");
    assert_eq!(reset.status(), 200);
    for topic in ["up", "down", "up"] {
        send(&sim, &prompt(topic, 20)).await;
    }
    let state = sim.state().await;
    assert!(state["cache"]["evictions"].as_u64() > Some(0), "{state}");

    // The replay from the first batch rebuilds exactly the sim's cache.
    let replay = sim.kv_replay.clone().expect("replay endpoint");
    let batches = eventually("the replayed set to match the sim's", || async {
        let batches = replay_from(&replay, 0, &ReplayOptions::default())
            .await
            .ok()?;
        let mut set = BTreeSet::new();
        let decoded: Vec<KvEventBatch> = batches
            .into_iter()
            .map(|b| b.batch.expect("replayed batch decodes"))
            .collect();
        for batch in &decoded {
            apply(&mut set, batch).expect("consistent stream");
        }
        (set == sim.cached().await).then_some(decoded)
    })
    .await;
    let tags: BTreeSet<&str> = batches
        .iter()
        .flat_map(|b| b.events.iter().map(KvEvent::tag))
        .collect();
    assert_eq!(
        tags,
        BTreeSet::from(["AllBlocksCleared", "BlockRemoved", "BlockStored"])
    );
    for batch in &batches {
        check_shapes(batch, &hasher);
    }

    // The live stream carries the same batches, in order, up to the last.
    let last = batches.len() as u64 - 1;
    while live.last().map(|r| r.seq) < Some(last) {
        let got = timeout(Duration::from_secs(10), sub.recv())
            .await
            .expect("live batch")
            .expect("decodes");
        live.push(got);
    }
    for pair in live.windows(2) {
        assert!(pair[0].seq < pair[1].seq);
    }
    for received in &live {
        assert_eq!(received.batch, batches[received.seq as usize]);
    }
}
