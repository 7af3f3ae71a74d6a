//! Against vLLM's vectors: `sha256_cbor` hashes coincide, default
//! `sha256` events map to the `sha256_cbor` hashes of their tokens; removals,
//! media, parents and bounds.

use super::*;

fn vectors(name: &str) -> Value {
    let path = format!("{}/../../../shared/vllm/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn seed_of(v: &Value) -> HashSeed {
    HashSeed::from_env_value(v.as_str().map(str::to_owned))
}

fn loras(case: &Value) -> HashMap<String, LoraKey> {
    let mut out = HashMap::new();
    if let Some(l) = case.get("lora").filter(|l| !l.is_null()) {
        let name = l["lora_name"].as_str().unwrap();
        out.insert(
            name.to_owned(),
            LoraKey::new(name, l["lora_path"].as_str().unwrap()),
        );
    }
    out
}

/// The event vLLM 0.33 sends for blocks `from..to` of a case hashed with
/// `sha256_cbor`: engine hashes are the external u64s.
fn stored_event(case: &Value, from: usize, to: usize) -> BlockStored {
    let blocks = case["blocks"].as_array().unwrap();
    let tokens: Vec<u32> = case["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let lora_name = case
        .get("lora")
        .filter(|l| !l.is_null())
        .map(|l| l["lora_name"].as_str().unwrap().to_owned());
    let salt = case.get("cache_salt").and_then(Value::as_str);
    let extra_keys = (from..to)
        .map(|i| {
            let mut items = Vec::new();
            if let Some(n) = &lora_name {
                items.push(rmpv::Value::from(n.as_str()));
            }
            if let (0, Some(s)) = (i, salt) {
                items.push(rmpv::Value::from(s));
            }
            if items.is_empty() {
                rmpv::Value::Nil
            } else {
                rmpv::Value::Array(items)
            }
        })
        .collect();
    BlockStored {
        block_hashes: (from..to)
            .map(|i| EngineHash::Int(blocks[i]["external_u64"].as_u64().unwrap()))
            .collect(),
        parent_block_hash: (from > 0)
            .then(|| EngineHash::Int(blocks[from - 1]["external_u64"].as_u64().unwrap())),
        token_ids: tokens[from * 16..to * 16].to_vec(),
        block_size: 16,
        medium: Some("GPU".into()),
        lora_name,
        extra_keys: Some(extra_keys),
        ..BlockStored::default()
    }
}

#[test]
fn with_sha256_cbor_and_the_same_seed_engine_and_router_hashes_coincide() {
    let v = vectors("block_hashes.json");
    let variant = &v["variants"][0];
    assert_eq!(variant["vllm_version"], "0.33.0");
    let mut checked = 0;
    for by_seed in variant["by_pythonhashseed"].as_array().unwrap() {
        let seed = seed_of(&by_seed["PYTHONHASHSEED"]);
        let run = by_seed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["hash_algo"] == "sha256_cbor")
            .unwrap();
        for case in run["cases"].as_array().unwrap() {
            let n = case["blocks"].as_array().unwrap().len();
            if n == 0 || case["name"].as_str().unwrap().starts_with("multimodal") {
                continue;
            }
            let hasher = BlockHasher::new(16, &seed).unwrap();
            let mut blocks = EngineBlocks::new(hasher, loras(case), 1 << 20);
            // Split as vLLM may: the first block, then the rest (parent given).
            let mut delta = BlockDelta::default();
            let first = KvEvent::BlockStored(stored_event(case, 0, 1));
            assert_eq!(blocks.apply(&first, &mut delta), Applied::Changed);
            if n > 1 {
                let rest = KvEvent::BlockStored(stored_event(case, 1, n));
                assert_eq!(blocks.apply(&rest, &mut delta), Applied::Changed);
            }
            let mut engine: Vec<BlockHash> = case["blocks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| BlockHash(b["external_u64"].as_u64().unwrap()))
                .collect();
            // Reported: the indexed ones (anchors; the last block of the
            // run of blocks 1..n when it has two or more); translated: all.
            let indexed: Vec<BlockHash> = (0..n)
                .filter(|&p| p == 0 || protocol::index::is_indexed_in_run(p, p - 1, n - 1))
                .map(|p| engine[p])
                .collect();
            assert_eq!(hashes(&delta.stored), indexed, "{}", case["name"]);
            let mut all = blocks.all_hashes();
            all.sort();
            engine.sort();
            assert_eq!(
                all, engine,
                "{} {:?}",
                case["name"], by_seed["PYTHONHASHSEED"]
            );
            checked += 1;
        }
    }
    assert!(checked >= 18, "only {checked} cases checked");
}

#[test]
fn default_sha256_events_map_to_the_sha256_cbor_hashes_of_their_tokens() {
    let ev = vectors("kv_events.json");
    let bh = vectors("block_hashes.json");
    let cbor_run = bh["variants"][0]["by_pythonhashseed"][0]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["hash_algo"] == "sha256_cbor")
        .unwrap()
        .clone();
    // Every router hash the cbor vectors know, by case.
    let expected: BTreeSet<u64> = cbor_run["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| ["tokens_48_three_blocks", "lora_32"].contains(&c["name"].as_str().unwrap()))
        .flat_map(|c| c["blocks"].as_array().unwrap().clone())
        .map(|b| b["external_u64"].as_u64().unwrap())
        .collect();
    let mut loras = HashMap::new();
    loras.insert(
        "sql-lora".to_owned(),
        LoraKey::new("sql-lora", "/adapters/sql-lora"),
    );
    let mut variants = 0;
    for variant in ev["variants"].as_array().unwrap() {
        if variant["vllm_version"] != "0.33.0" {
            continue;
        }
        variants += 1;
        let hasher = BlockHasher::new(16, &HashSeed::Default).unwrap();
        let mut blocks = EngineBlocks::new(hasher, loras.clone(), 1 << 20);
        let mut seen = BTreeSet::new();
        for msg in variant["pub_messages"].as_array().unwrap() {
            let payload = hex::decode(msg["frames_hex"][2].as_str().unwrap()).unwrap();
            let batch = decode_batch(&payload).unwrap();
            for e in &batch.events {
                let mut delta = BlockDelta::default();
                let applied = blocks.apply(e, &mut delta);
                assert!(
                    !matches!(applied, Applied::Skipped(_)),
                    "{applied:?} for {e:?}"
                );
                seen.extend(delta.stored.iter().map(|b| b.hash.0));
            }
        }
        assert!(!seen.is_empty());
        assert!(
            seen.is_subset(&expected),
            "router hashes {seen:x?} not among the sha256_cbor vectors {expected:x?}"
        );
    }
    assert_eq!(variants, 2, "0.33 int and bytes variants");
}

#[test]
fn removals_media_parents_and_bounds() {
    let hasher = BlockHasher::default();
    let mut blocks = EngineBlocks::new(hasher.clone(), HashMap::new(), 3);
    let tokens: Vec<u32> = (0..48).collect();
    let router = hasher.block_hashes(&tokens, &Default::default());
    let stored = |hashes: Vec<u64>, parent: Option<u64>, toks: &[u32], medium: &str| {
        KvEvent::BlockStored(BlockStored {
            block_hashes: hashes.into_iter().map(EngineHash::Int).collect(),
            parent_block_hash: parent.map(EngineHash::Int),
            token_ids: toks.to_vec(),
            block_size: 16,
            medium: Some(medium.into()),
            ..BlockStored::default()
        })
    };
    let removed = |hashes: Vec<u64>, medium: &str| {
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: hashes.into_iter().map(EngineHash::Int).collect(),
            medium: Some(medium.into()),
            ..BlockRemoved::default()
        })
    };
    let mut d = BlockDelta::default();
    // A child whose parent was never seen cannot be translated.
    assert_eq!(
        blocks.apply(&stored(vec![2], Some(1), &tokens[16..32], "GPU"), &mut d),
        Applied::Skipped(Unmappable::UnknownParent)
    );
    blocks.apply(&stored(vec![1, 2], None, &tokens[..32], "GPU"), &mut d);
    // Positions 0 and 1 are anchors (protocol::index).
    assert_eq!(hashes(&d.stored), router[..2]);
    assert_eq!(blocks.len(), 2);
    // The same block offloaded to CPU is still one router block; once its
    // GPU copy goes, it is reported again, on the CPU tier.
    let mut d = BlockDelta::default();
    blocks.apply(&stored(vec![2], Some(1), &tokens[16..32], "CPU"), &mut d);
    assert!(d.is_empty(), "its best copy is still on the GPU");
    blocks.apply(&removed(vec![2], "GPU"), &mut d);
    assert!(d.removed.is_empty(), "still held on CPU");
    assert_eq!(d.stored.len(), 1);
    assert_eq!((d.stored[0].hash, d.stored[0].tier), (router[1], Tier::Cpu));
    let mut d = BlockDelta::default();
    blocks.apply(&removed(vec![2], "CPU"), &mut d);
    assert_eq!(hashes(&d.removed), router[1..2]);
    // vLLM's offloading connector stores CPU copies without tokens or a
    // parent: a copy of a held block keeps it held when the GPU copy goes;
    // a copy of a block never seen is refused, not guessed.
    let mut d = BlockDelta::default();
    blocks.apply(&stored(vec![2], Some(1), &tokens[16..32], "GPU"), &mut d);
    assert_eq!(
        blocks.apply(&stored(vec![2], None, &[], "CPU"), &mut d),
        Applied::Changed
    );
    blocks.apply(&removed(vec![2], "GPU"), &mut d);
    assert!(d.removed.is_empty(), "the CPU copy still holds it");
    assert_eq!(d.stored.last().map(|b| b.tier), Some(Tier::Cpu));
    assert_eq!(
        blocks.apply(&stored(vec![2, 42], None, &[], "CPU"), &mut d),
        Applied::Skipped(Unmappable::UnknownCopies(1))
    );
    blocks.apply(&removed(vec![2], "CPU"), &mut d);
    assert_eq!(hashes(&d.removed), router[1..2]);
    // Bounded: a fourth engine block does not fit in 3.
    let mut d = BlockDelta::default();
    blocks.apply(&stored(vec![2, 3], Some(1), &tokens[16..48], "GPU"), &mut d);
    assert_eq!(
        blocks.apply(&stored(vec![9], Some(3), &tokens[..16], "GPU"), &mut d),
        Applied::Skipped(Unmappable::Full(3))
    );
    // Wrong token count and block size are refused, not guessed.
    assert!(matches!(
        blocks.apply(&stored(vec![7], None, &tokens[..15], "GPU"), &mut d),
        Applied::Skipped(Unmappable::TokenCount { .. })
    ));
    assert_eq!(
        blocks.apply(&KvEvent::AllBlocksCleared, &mut d),
        Applied::Cleared
    );
    assert!(blocks.is_empty());
}
