//! KV-event frames a real vLLM sent (the CPU build, recorded by
//! `loadtest real-engine --fixture`, see docs/real-engine.md): every
//! published message and replay reply parses and decodes with nothing
//! unknown, and the reporter's own hashes of each engine's stored blocks
//! (`sha256_cbor`, the engine's `PYTHONHASHSEED`) are the engine's hashes:
//! after each engine's stream, the router hashes the reporter holds are
//! exactly the engine hashes still stored.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use protocol::hashing::{BlockHasher, HashSeed};
use protocol::kv_events::{KvEvent, PubMessage, ReplayReply, decode_batch};
use serde_json::Value;
use worker::reporter::{Applied, BlockDelta, EngineBlocks};

fn fixture() -> Value {
    let path = format!(
        "{}/tests/fixtures/real_vllm_frames.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn frames(m: &Value) -> Vec<Bytes> {
    m["frames_hex"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| Bytes::from(hex::decode(f.as_str().unwrap()).unwrap()))
        .collect()
}

#[test]
fn every_real_frame_decodes_with_nothing_unknown() {
    let f = fixture();
    let (mut published, mut replayed, mut ends, mut events) = (0, 0, 0, 0);
    for m in f["messages"].as_array().unwrap() {
        let payload = match m["socket"].as_str().unwrap() {
            "sub" => {
                published += 1;
                PubMessage::from_frames(frames(m)).unwrap().payload
            }
            "replay" => match ReplayReply::from_dealer_frames(frames(m)).unwrap() {
                ReplayReply::Batch { payload, .. } => {
                    replayed += 1;
                    payload
                }
                ReplayReply::End => {
                    ends += 1;
                    continue;
                }
            },
            other => panic!("unknown socket {other}"),
        };
        let batch = decode_batch(&payload).unwrap();
        assert_eq!(
            batch.unknown_counts(),
            (0, 0, 0),
            "vLLM {} sent fields or events this decoder does not know",
            f["vllm_version"]
        );
        events += batch.events.len();
    }
    assert!(published >= 10, "{published} published messages");
    assert!(
        replayed >= 1 && ends == 1,
        "{replayed} replayed, {ends} end markers"
    );
    assert!(events >= published);
}

#[test]
fn the_reporter_hashes_real_blocks_as_the_engine_does() {
    let f = fixture();
    let block_size = f["block_size"].as_u64().unwrap() as usize;
    let seed = HashSeed::from_env_value(f["python_hash_seed"].as_str().map(str::to_owned));
    assert_eq!(f["hash_algo"], "sha256_cbor");
    let mut per_engine: BTreeMap<String, Vec<Bytes>> = BTreeMap::new();
    for m in f["messages"].as_array().unwrap() {
        if m["socket"] == "sub" {
            let msg = PubMessage::from_frames(frames(m)).unwrap();
            per_engine
                .entry(m["engine"].as_str().unwrap().to_owned())
                .or_default()
                .push(msg.payload);
        }
    }
    let (mut stored_events, mut stored_blocks, mut cleared) = (0, 0, 0);
    for (engine, payloads) in per_engine {
        let hasher = BlockHasher::new(block_size, &seed).unwrap();
        let mut blocks = EngineBlocks::new(hasher, HashMap::new(), 1 << 20);
        let mut held: BTreeSet<u64> = BTreeSet::new();
        for (i, p) in payloads.iter().enumerate() {
            for e in decode_batch(p).unwrap().events {
                let mut delta = BlockDelta::default();
                let applied = blocks.apply(&e, &mut delta);
                match &e {
                    KvEvent::BlockStored(s) => {
                        stored_events += 1;
                        stored_blocks += s.block_hashes.len();
                        assert_eq!(applied, Applied::Changed, "{engine}: {s:?}");
                        held.extend(s.block_hashes.iter().map(|h| h.to_block_hash().0));
                    }
                    KvEvent::BlockRemoved(r) => {
                        for h in &r.block_hashes {
                            held.remove(&h.to_block_hash().0);
                        }
                    }
                    KvEvent::AllBlocksCleared => {
                        cleared += 1;
                        assert_eq!(applied, Applied::Cleared);
                        held.clear();
                    }
                    KvEvent::Unknown(u) => panic!("unknown event {u:?}"),
                }
            }
            // After every batch, the router hashes are the engine's.
            let ours: BTreeSet<u64> = blocks.all_hashes().iter().map(|h| h.0).collect();
            assert_eq!(
                ours, held,
                "{engine}, batch {i}: router hashes differ from the engine's"
            );
        }
    }
    assert!(stored_blocks >= 200, "only {stored_blocks} stored blocks");
    assert!(stored_events >= 10, "{stored_events} BlockStored events");
    assert!(cleared >= 1, "the recording has no AllBlocksCleared");
}
