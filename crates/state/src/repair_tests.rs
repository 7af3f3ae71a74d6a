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
fn the_pattern_covers_every_wanted_bucket() {
    let mut want = [false; 256];
    want[0x3a] = true;
    want[0xf1] = true;
    assert_eq!(scan_pattern(&want), "[3f][1a]*");
}
