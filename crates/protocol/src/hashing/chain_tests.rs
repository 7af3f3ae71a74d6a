//! Unit tests of the block hasher.

use super::*;
use crate::hashing::LoraKey;

fn tokens(n: u32) -> Vec<u32> {
    (1000..1000 + n).collect()
}

fn hasher(seed: &str) -> BlockHasher {
    BlockHasher::new(16, &HashSeed::PythonHashSeed(seed.into())).unwrap()
}

#[test]
fn readme_worked_example_block_zero() {
    let toks = [
        128000, 9906, 11, 856, 836, 374, 0, 23, 24, 255, 256, 65535, 65536, 100000, 151643, 2,
    ];
    let d = hasher("0").block_digests(&toks, &ExtraKeys::default());
    assert_eq!(d.len(), 1);
    assert!(d[0].to_hex().starts_with("4be2efbf"));
    assert_eq!(d[0].external(), BlockHash(0x7219_bff9_b083_37ef));
    assert_eq!(BlockHash::from(d[0]), BlockHash(0x7219_bff9_b083_37ef));
}

#[test]
fn a_continued_run_hashes_like_the_whole_chain() {
    let h = BlockHasher::default();
    let keys = ExtraKeys {
        lora: Some(LoraKey::new("sql", "/adapters/sql")),
        ..ExtraKeys::default()
    };
    let all = tokens(80);
    let whole = h.block_digests(&all, &keys);
    let head = h.continue_digests(None, &all[..32], &keys);
    let tail = h.continue_digests(Some(&head[1]), &all[32..], &keys);
    assert_eq!([head, tail].concat(), whole);
}

#[test]
fn only_full_blocks_are_hashed() {
    let h = BlockHasher::default();
    let keys = ExtraKeys::default();
    assert_eq!(h.block_hashes(&tokens(40), &keys).len(), 2);
    assert_eq!(h.block_hashes(&tokens(15), &keys).len(), 0);
    assert_eq!(h.block_hashes(&tokens(16), &keys).len(), 1);
    assert_eq!(h.block_hashes(&[], &keys).len(), 0);
    // The tail does not influence the full blocks' hashes.
    assert_eq!(
        h.block_hashes(&tokens(40), &keys),
        h.block_hashes(&tokens(32), &keys)
    );
    let small = BlockHasher::new(4, &HashSeed::Default).unwrap();
    assert_eq!(small.block_hashes(&tokens(40), &keys).len(), 10);
}

#[test]
fn zero_block_size_is_rejected() {
    assert_eq!(
        BlockHasher::new(0, &HashSeed::Default),
        Err(InvalidBlockSize)
    );
}

#[test]
fn blocks_chain_from_their_parent() {
    let h = hasher("12345");
    let traces = h.block_traces(&tokens(48), &ExtraKeys::default());
    assert_eq!(traces.len(), 3);
    assert_eq!(traces[0].parent, *h.none_hash());
    assert_eq!(traces[1].parent, traces[0].digest);
    assert_eq!(traces[2].parent, traces[1].digest);
    for t in &traces {
        assert_eq!(BlockDigest::of(&t.preimage), t.digest);
        assert_eq!(&t.preimage[..3], &[0x83, 0x58, 0x20]);
        assert_eq!(&t.preimage[3..35], t.parent.as_bytes());
        assert_eq!(*t.preimage.last().unwrap(), 0xf6);
    }
    let digests = h.block_digests(&tokens(48), &ExtraKeys::default());
    let hashes = h.block_hashes(&tokens(48), &ExtraKeys::default());
    assert_eq!(
        digests
            .iter()
            .map(BlockDigest::external)
            .collect::<Vec<_>>(),
        hashes
    );
}

#[test]
fn empty_cache_salt_is_no_salt() {
    let h = BlockHasher::default();
    let none = h.block_hashes(&tokens(32), &ExtraKeys::default());
    let empty = ExtraKeys {
        cache_salt: Some(String::new()),
        ..ExtraKeys::default()
    };
    assert_eq!(h.block_hashes(&tokens(32), &empty), none);
    let salted = ExtraKeys {
        cache_salt: Some("s".into()),
        ..ExtraKeys::default()
    };
    let s = h.block_hashes(&tokens(32), &salted);
    // The salt changes block 0, and through the chain every later block.
    assert_ne!(s[0], none[0]);
    assert_ne!(s[1], none[1]);
    let traces = h.block_traces(&tokens(32), &salted);
    assert_eq!(*traces[1].preimage.last().unwrap(), 0xf6);
}

#[test]
fn the_format_changes_only_the_extra_keys() {
    let seed = HashSeed::PythonHashSeed("0".into());
    let tagged = BlockHasher::new(16, &seed).unwrap();
    assert_eq!(tagged.extra_keys_format(), ExtraKeysFormat::Tagged);
    assert_eq!(
        BlockHasher::with_format(16, &seed, ExtraKeysFormat::Tagged),
        Ok(tagged.clone())
    );
    assert_eq!(
        BlockHasher::default().extra_keys_format(),
        ExtraKeysFormat::Tagged
    );
    assert_eq!(
        BlockHasher::with_format(0, &seed, ExtraKeysFormat::Untagged),
        Err(InvalidBlockSize)
    );
    let plain = ExtraKeys::default();
    let salted = ExtraKeys {
        cache_salt: Some("s".into()),
        ..ExtraKeys::default()
    };
    let mut salted_hashes = Vec::new();
    for format in [
        ExtraKeysFormat::Untagged,
        ExtraKeysFormat::UntaggedIdentifier,
        ExtraKeysFormat::LegacyIntLora,
    ] {
        let h = BlockHasher::with_format(16, &seed, format).unwrap();
        assert_eq!(h.none_hash(), tagged.none_hash());
        // Without extra keys every format hashes the same.
        assert_eq!(
            h.block_digests(&tokens(32), &plain),
            tagged.block_digests(&tokens(32), &plain)
        );
        salted_hashes.push(h.block_hashes(&tokens(32), &salted));
    }
    // The untagged formats all write the bare salt; the tagged one differs.
    assert_eq!(salted_hashes[0], salted_hashes[1]);
    assert_eq!(salted_hashes[0], salted_hashes[2]);
    assert_ne!(salted_hashes[0], tagged.block_hashes(&tokens(32), &salted));
}

#[test]
fn legacy_lora_without_int_id_hashes_no_blocks() {
    let h =
        BlockHasher::with_format(16, &HashSeed::Default, ExtraKeysFormat::LegacyIntLora).unwrap();
    let no_id = ExtraKeys {
        lora: Some(LoraKey::new("sql-lora", "/adapters/sql-lora")),
        ..ExtraKeys::default()
    };
    assert_eq!(
        h.check_keys(&no_id),
        Err(MissingLoraIntId {
            name: "sql-lora".into()
        })
    );
    assert!(h.block_hashes(&tokens(32), &no_id).is_empty());
    assert!(h.block_digests(&tokens(32), &no_id).is_empty());
    assert!(h.block_traces(&tokens(32), &no_id).is_empty());

    let with_id = ExtraKeys {
        lora: no_id.lora.clone().map(|l| l.with_int_id(1)),
        ..ExtraKeys::default()
    };
    assert_eq!(h.check_keys(&with_id), Ok(()));
    let traces = h.block_traces(&tokens(32), &with_id);
    assert_eq!(traces.len(), 2);
    // ... (lora_int_id,): [1]
    assert!(traces.iter().all(|t| t.preimage.ends_with(&[0x81, 0x01])));
    // The other formats ignore the int id and need none.
    assert_eq!(BlockHasher::default().check_keys(&no_id), Ok(()));
}
