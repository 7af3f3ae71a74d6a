//! Conformance: our `sha256_cbor` block hashes against the vectors produced by
//! vLLM's own code (`shared/vllm/block_hashes.json`, see its README).
//!
//! For every reproducible `sha256_cbor` run of every vLLM version and
//! `PYTHONHASHSEED` setting, each block whose extra-key shape we implement
//! must match byte for byte: the seed string, the NONE_HASH pre-image and
//! digest, and for each block the parent, the CBOR pre-image, the digest and
//! the external u64. Everything skipped is skipped by an explicit rule, and
//! the number of checked blocks is asserted, so the test cannot silently
//! check nothing.

use std::collections::BTreeMap;

use prefix_router::hashing::{
    BlockHash, BlockHasher, ExtraKeys, HashSeed, LoraKey, MultimodalItem, cbor,
};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/vllm/block_hashes.json"
);

/// The first vLLM release whose extra keys are tagged tuples, the only
/// shape implemented. Older vectors with extra keys are skipped.
const TAGGED_EXTRA_KEYS_SINCE: (u64, u64) = (0, 31);

/// Blocks checked per (vLLM version, PYTHONHASHSEED) group, at least:
/// 0.33.0 has 17 blocks per seed (8 plain + 9 with LoRA, salt or
/// multimodal keys); the legacy versions contribute their 8 plain blocks.
/// 0.23.0 with PYTHONHASHSEED unset is not reproducible, so it is absent.
const EXPECTED_MIN: [(&str, &str, usize); 8] = [
    ("0.33.0", "<unset>", 17),
    ("0.33.0", "0", 17),
    ("0.33.0", "12345", 17),
    ("0.30.0", "<unset>", 8),
    ("0.30.0", "0", 8),
    ("0.30.0", "12345", 8),
    ("0.23.0", "0", 8),
    ("0.23.0", "12345", 8),
];

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string in {v}"))
}

fn arr_field<'a>(v: &'a Value, key: &str) -> &'a Vec<Value> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not an array"))
}

fn u64_field(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a u64 in {v}"))
}

fn major_minor(version: &str) -> (u64, u64) {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

fn extra_keys(case: &Value) -> ExtraKeys {
    let lora = case.get("lora").map(|l| LoraKey {
        name: str_field(l, "lora_name").to_owned(),
        path: str_field(l, "lora_path").to_owned(),
    });
    let cache_salt = case
        .get("cache_salt")
        .map(|s| s.as_str().unwrap().to_owned());
    let multimodal = case
        .get("mm_features")
        .map(|items| {
            items
                .as_array()
                .unwrap()
                .iter()
                .map(|item| {
                    // [identifier, offset, length]
                    let item = item.as_array().unwrap();
                    MultimodalItem {
                        identifier: item[0].as_str().unwrap().to_owned(),
                        offset: item[1].as_u64().unwrap(),
                        length: item[2].as_u64().unwrap(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    ExtraKeys {
        lora,
        multimodal,
        cache_salt,
    }
}

#[test]
fn sha256_cbor_vectors_match_vllm_bit_for_bit() {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("{VECTORS}: {e}"));
    let doc: Value = serde_json::from_str(&text).unwrap();
    let block_size = usize::try_from(u64_field(&doc, "block_size")).unwrap();
    assert_eq!(block_size, 16);

    let mut verified: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut none_hashes_verified = 0usize;
    let mut skipped_other_algo = 0usize;
    let mut skipped_not_reproducible = 0usize;
    let mut skipped_legacy_extra_key_blocks = 0usize;

    for variant in arr_field(&doc, "variants") {
        let version = str_field(variant, "vllm_version");
        let tagged = major_minor(version) >= TAGGED_EXTRA_KEYS_SINCE;
        for by_seed in arr_field(variant, "by_pythonhashseed") {
            let env_seed = by_seed["PYTHONHASHSEED"].as_str().map(str::to_owned);
            let seed_label = env_seed.clone().unwrap_or_else(|| "<unset>".into());
            let seed = HashSeed::from_env_value(env_seed);
            for run in arr_field(by_seed, "runs") {
                let algo = str_field(run, "hash_algo");
                if algo != "sha256_cbor" {
                    // sha256 (pickle), xxhash, xxhash_cbor: not implemented.
                    skipped_other_algo += 1;
                    continue;
                }
                if !run["reproducible"].as_bool().unwrap() {
                    // NONE_HASH came from os.urandom: there is nothing to match.
                    assert!(arr_field(run, "cases").is_empty());
                    skipped_not_reproducible += 1;
                    continue;
                }
                let ctx = format!("vLLM {version}, PYTHONHASHSEED={seed_label}");

                // NONE_HASH: seed string, pre-image, digest.
                assert_eq!(
                    seed.seed_str(),
                    str_field(run, "none_hash_seed_string"),
                    "{ctx}"
                );
                let mut seed_preimage = Vec::new();
                cbor::write_text(&mut seed_preimage, seed.seed_str());
                assert_eq!(
                    hex::encode(&seed_preimage),
                    str_field(run, "none_hash_preimage_hex"),
                    "{ctx}: NONE_HASH pre-image"
                );
                let hasher = BlockHasher::new(block_size, &seed).unwrap();
                assert_eq!(
                    hasher.none_hash().to_hex(),
                    str_field(run, "none_hash_hex"),
                    "{ctx}: NONE_HASH"
                );
                none_hashes_verified += 1;

                let count = verified
                    .entry((version.to_owned(), seed_label.clone()))
                    .or_default();
                for case in arr_field(run, "cases") {
                    let name = str_field(case, "name");
                    let keys = extra_keys(case);
                    let blocks = arr_field(case, "blocks");
                    if keys != ExtraKeys::default() && !tagged {
                        // Untagged pre-0.31 extra keys: not implemented.
                        skipped_legacy_extra_key_blocks += blocks.len();
                        continue;
                    }
                    let tokens: Vec<u32> = arr_field(case, "token_ids")
                        .iter()
                        .map(|t| u32::try_from(t.as_u64().unwrap()).unwrap())
                        .collect();

                    let traces = hasher.block_traces(&tokens, &keys);
                    let want_blocks = usize::try_from(u64_field(case, "num_full_blocks")).unwrap();
                    assert_eq!(traces.len(), want_blocks, "{ctx}, {name}: block count");
                    assert_eq!(traces.len(), blocks.len(), "{ctx}, {name}: block count");

                    for (trace, want) in traces.iter().zip(blocks) {
                        let at = format!("{ctx}, {name}, block {}", want["index"]);
                        assert_eq!(
                            trace.parent.to_hex(),
                            str_field(want, "parent_hash_hex"),
                            "{at}: parent"
                        );
                        assert_eq!(
                            hex::encode(&trace.preimage),
                            str_field(want, "preimage_hex"),
                            "{at}: CBOR pre-image (extra keys {})",
                            want["extra_keys_python_repr"]
                        );
                        assert_eq!(
                            trace.digest.to_hex(),
                            str_field(want, "block_hash_hex"),
                            "{at}: digest"
                        );
                        assert_eq!(
                            trace.digest.external(),
                            BlockHash(u64_field(want, "external_u64")),
                            "{at}: external u64"
                        );
                        assert_eq!(
                            trace.digest.external().to_hex(),
                            str_field(want, "external_u64_hex"),
                            "{at}: external u64 hex"
                        );
                        *count += 1;
                    }

                    // The production paths agree with the traced one.
                    let digests = hasher.block_digests(&tokens, &keys);
                    let hashes = hasher.block_hashes(&tokens, &keys);
                    assert_eq!(
                        digests,
                        traces.iter().map(|t| t.digest).collect::<Vec<_>>(),
                        "{ctx}, {name}"
                    );
                    assert_eq!(
                        hashes,
                        digests.iter().map(|d| d.external()).collect::<Vec<_>>(),
                        "{ctx}, {name}"
                    );
                }
            }
        }
    }

    let total: usize = verified.values().sum();
    println!("sha256_cbor block vectors verified: {total}");
    for ((version, seed), n) in &verified {
        println!("  vLLM {version:<7} PYTHONHASHSEED={seed:<8} {n} blocks");
    }
    println!(
        "NONE_HASH vectors verified: {none_hashes_verified}; skipped: {skipped_other_algo} runs of \
         other algorithms, {skipped_not_reproducible} non-reproducible sha256_cbor runs, \
         {skipped_legacy_extra_key_blocks} blocks with pre-0.31 extra keys"
    );

    for (version, seed, min) in EXPECTED_MIN {
        let got = verified
            .get(&(version.to_owned(), seed.to_owned()))
            .copied()
            .unwrap_or(0);
        assert!(
            got >= min,
            "vLLM {version}, PYTHONHASHSEED={seed}: {got} blocks verified, expected at least {min}"
        );
    }
    let expected_total: usize = EXPECTED_MIN.iter().map(|(_, _, n)| n).sum();
    assert!(total >= expected_total, "{total} < {expected_total}");
    assert!(none_hashes_verified >= 8, "{none_hashes_verified}");
}
