//! Unit tests of the repair's bucket lists.

use super::*;

#[test]
fn buckets_parse_per_part_and_refuse_nonsense() {
    let b = |v: &[&str], parts| {
        buckets_by_part(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>(), parts)
    };
    let one = b(&["3a", "ff"], 1).unwrap();
    assert!(one[0][0x3a] && one[0][0xff] && !one[0][0]);
    let two = b(&["1:00"], 2).unwrap();
    assert!(two[1][0] && !two[0][0]);
    for bad in [&["3"][..], &["zz"], &["2:00"], &["x:00"], &["abc"]] {
        assert!(b(bad, 2).is_err(), "{bad:?}");
    }
    let many: Vec<String> = (0..=MAX_REPAIR_BUCKETS)
        .map(|i| format!("{i:02x}"))
        .collect();
    assert!(buckets_by_part(&many, 1).is_err());
}

#[test]
fn a_digest_bucket_is_32_forward_buckets() {
    let keys: Vec<String> = forward_buckets(0x3a).collect();
    assert_eq!(keys.len(), 32);
    assert_eq!(keys[0], "3a00");
    assert_eq!(keys[1], "3a08");
    assert_eq!(keys[31], "3af8");
    // Every hash of the digest bucket lands in one of them.
    for h in [
        0x3a00_0000_0000_0000u64,
        0x3a7f_ffff_ffff_ffff,
        0x3aff_0000_0000_0001,
    ] {
        let key = format!("{:04x}", (h >> 48) & 0xfff8);
        assert!(keys.contains(&key), "{h:x} -> {key}");
    }
}
