//! Conformance: our `sha256_cbor` block hashes against the vectors produced by
//! vLLM's own code (`shared/vllm/block_hashes.json`, see its README).
//!
//! Every `sha256_cbor` block of every vLLM version and `PYTHONHASHSEED`
//! setting must match byte for byte, with the extra-key format chosen from
//! the vector's vLLM version: the seed string, the NONE_HASH pre-image and
//! digest, and for each block the parent, the CBOR pre-image, the digest and
//! the external u64. The only runs skipped are those vLLM marks as not
//! reproducible (NONE_HASH from `os.urandom`), which hold no blocks. The
//! exact number of checked blocks is asserted, per group and against an
//! independent count of the file's blocks, so nothing can be skipped
//! silently.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::collections::BTreeMap;

use protocol::hashing::{
    BlockHash, BlockHasher, ExtraKeys, ExtraKeysFormat, HashSeed, LoraKey, MultimodalItem, cbor,
};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/vllm/block_hashes.json"
);

/// Blocks per reproducible (vLLM version, PYTHONHASHSEED) group: 8 plain
/// blocks and 9 with LoRA, salt or multimodal keys. 0.23.0 with
/// PYTHONHASHSEED unset is not reproducible, so it has no group.
const EXPECTED: [(&str, &str, usize); 8] = [
    ("0.23.0", "0", 17),
    ("0.23.0", "12345", 17),
    ("0.30.0", "0", 17),
    ("0.30.0", "12345", 17),
    ("0.30.0", "<unset>", 17),
    ("0.33.0", "0", 17),
    ("0.33.0", "12345", 17),
    ("0.33.0", "<unset>", 17),
];

/// All `sha256_cbor` blocks in the file: 8 groups of 17.
const EXPECTED_TOTAL: usize = 136;

/// The format each vector version must map to (README, "Extra keys per
/// block"), so a change to the version table cannot go unnoticed.
const EXPECTED_FORMATS: [(&str, ExtraKeysFormat); 3] = [
    ("0.23.0", ExtraKeysFormat::Untagged),
    ("0.30.0", ExtraKeysFormat::Untagged),
    ("0.33.0", ExtraKeysFormat::Tagged),
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

fn format_of(version: &str) -> ExtraKeysFormat {
    let parts: Vec<u64> = version.split('.').map(|p| p.parse().unwrap()).collect();
    assert_eq!(parts.len(), 3, "{version}");
    ExtraKeysFormat::for_vllm_version(parts[0], parts[1], parts[2])
        .unwrap_or_else(|| panic!("no extra-key format for vLLM {version}"))
}

fn extra_keys(case: &Value) -> ExtraKeys {
    let lora = case.get("lora").map(|l| {
        LoraKey::new(str_field(l, "lora_name"), str_field(l, "lora_path"))
            .with_int_id(u64_field(l, "lora_int_id"))
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

/// Canonical CBOR of a block's recorded `extra_keys` JSON (null, strings,
/// integers, arrays), independent of the hasher's encoder: the vector's
/// pre-image must end with it.
fn json_cbor(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => cbor::write_null(out),
        Value::String(s) => cbor::write_text(out, s),
        Value::Number(n) => cbor::write_int(out, n.as_i64().unwrap()),
        Value::Array(items) => {
            cbor::write_array_header(out, items.len());
            for item in items {
                json_cbor(out, item);
            }
        }
        other => panic!("unexpected extra key {other}"),
    }
}

/// The number of `sha256_cbor` blocks in the file, counted without any of
/// the test's rules.
fn all_sha256_cbor_blocks(doc: &Value) -> usize {
    let mut n = 0;
    for variant in arr_field(doc, "variants") {
        for by_seed in arr_field(variant, "by_pythonhashseed") {
            for run in arr_field(by_seed, "runs") {
                if str_field(run, "hash_algo") == "sha256_cbor" {
                    for case in arr_field(run, "cases") {
                        n += arr_field(case, "blocks").len();
                    }
                }
            }
        }
    }
    n
}

#[test]
fn sha256_cbor_vectors_match_vllm_bit_for_bit() {
    let text = std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("{VECTORS}: {e}"));
    let doc: Value = serde_json::from_str(&text).unwrap();
    let block_size = usize::try_from(u64_field(&doc, "block_size")).unwrap();
    assert_eq!(block_size, 16);

    let mut verified: BTreeMap<(String, String), usize> = BTreeMap::new();
    // Blocks of cases with LoRA, salt or multimodal inputs, and among them
    // those whose extra keys are not null, by format.
    let mut keyed_cases_by_format: BTreeMap<String, usize> = BTreeMap::new();
    let mut with_keys_by_format: BTreeMap<String, usize> = BTreeMap::new();
    let mut none_hashes_verified = 0usize;
    let mut skipped_other_algo = 0usize;
    let mut skipped_not_reproducible = Vec::new();

    for variant in arr_field(&doc, "variants") {
        let version = str_field(variant, "vllm_version");
        let format = format_of(version);
        let want_format = EXPECTED_FORMATS.iter().find(|(v, _)| *v == version);
        assert_eq!(want_format.map(|(_, f)| *f), Some(format), "vLLM {version}");
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
                let ctx = format!("vLLM {version}, PYTHONHASHSEED={seed_label}");
                if !run["reproducible"].as_bool().unwrap() {
                    // NONE_HASH came from os.urandom: there is nothing to match.
                    assert!(arr_field(run, "cases").is_empty(), "{ctx}");
                    skipped_not_reproducible.push(ctx);
                    continue;
                }

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
                let hasher = BlockHasher::with_format(block_size, &seed, format).unwrap();
                assert_eq!(hasher.extra_keys_format(), format);
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
                    assert_eq!(hasher.check_keys(&keys), Ok(()), "{ctx}, {name}");
                    let blocks = arr_field(case, "blocks");
                    let tokens: Vec<u32> = arr_field(case, "token_ids")
                        .iter()
                        .map(|t| u32::try_from(t.as_u64().unwrap()).unwrap())
                        .collect();

                    let traces = hasher.block_traces(&tokens, &keys);
                    let want_blocks = usize::try_from(u64_field(case, "num_full_blocks")).unwrap();
                    assert_eq!(traces.len(), want_blocks, "{ctx}, {name}: block count");
                    assert_eq!(traces.len(), blocks.len(), "{ctx}, {name}: block count");

                    for (i, (trace, want)) in traces.iter().zip(blocks).enumerate() {
                        let at = format!("{ctx}, {name}, block {i}");
                        assert_eq!(u64_field(want, "index"), i as u64, "{at}");
                        let range = arr_field(want, "token_range");
                        assert_eq!(range[0].as_u64(), Some(16 * i as u64), "{at}");
                        assert_eq!(want["parent_is_none_hash"].as_bool(), Some(i == 0), "{at}");
                        assert_eq!(
                            trace.parent.to_hex(),
                            str_field(want, "parent_hash_hex"),
                            "{at}: parent"
                        );
                        let mut keys_cbor = Vec::new();
                        json_cbor(&mut keys_cbor, &want["extra_keys"]);
                        let preimage_hex = str_field(want, "preimage_hex");
                        assert!(
                            preimage_hex.ends_with(&hex::encode(&keys_cbor)),
                            "{at}: the vector's pre-image does not end with its extra keys"
                        );
                        assert_eq!(
                            hex::encode(&trace.preimage),
                            preimage_hex,
                            "{at}: CBOR pre-image ({format:?}, extra keys {})",
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
                        if keys != ExtraKeys::default() {
                            *keyed_cases_by_format
                                .entry(format!("{format:?}"))
                                .or_default() += 1;
                        }
                        if !want["extra_keys"].is_null() {
                            *with_keys_by_format
                                .entry(format!("{format:?}"))
                                .or_default() += 1;
                        }
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
    println!("  in cases with extra inputs, by format: {keyed_cases_by_format:?}");
    println!("  with non-null extra keys, by format: {with_keys_by_format:?}");
    println!(
        "NONE_HASH vectors verified: {none_hashes_verified}; skipped: {skipped_other_algo} runs of \
         other algorithms, non-reproducible sha256_cbor runs (no blocks): \
         {skipped_not_reproducible:?}"
    );

    let want: BTreeMap<(String, String), usize> = EXPECTED
        .iter()
        .map(|(v, s, n)| ((v.to_string(), s.to_string()), *n))
        .collect();
    assert_eq!(verified, want);
    assert_eq!(total, EXPECTED_TOTAL);
    assert_eq!(all_sha256_cbor_blocks(&doc), EXPECTED_TOTAL);
    assert_eq!(none_hashes_verified, 8);
    // Per group, 9 blocks are in cases with extra inputs, 8 of them with
    // non-null keys (the salt is only on block 0): 3 tagged groups, 5
    // untagged ones (the 45 blocks that used to be skipped).
    let by_format = |tagged: usize, untagged: usize| -> BTreeMap<String, usize> {
        [("Tagged".into(), tagged), ("Untagged".into(), untagged)].into()
    };
    assert_eq!(keyed_cases_by_format, by_format(27, 45));
    assert_eq!(with_keys_by_format, by_format(24, 40));
    assert_eq!(
        skipped_not_reproducible,
        ["vLLM 0.23.0, PYTHONHASHSEED=<unset>"]
    );
}
