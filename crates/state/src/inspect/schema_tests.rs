//! Unit tests of `schema`.

use super::*;

#[test]
fn keys_are_classified() {
    let m = |k: ModelKey| KeyClass::Model {
        model: "Qwen/Q-8B".into(),
        key: k,
    };
    let entry = format!("pr:{{Qwen/Q-8B}}:rc:{}", "0a".repeat(32));
    let cases = [
        ("pr:models", KeyClass::Models),
        ("pr:worker_model", KeyClass::WorkerModel),
        (
            "pr:tenant:{key:0123456789abcdef}:rq",
            KeyClass::Tenant(TenantKey::ArrivalTime),
        ),
        (
            "pr:tenant:{team-a}:ccl",
            KeyClass::Tenant(TenantKey::InFlightLeases),
        ),
        ("pr:{Qwen/Q-8B}:ids", m(ModelKey::Ids)),
        ("pr:{Qwen/Q-8B}:f:3a78", m(ModelKey::Bucket(0x3a78))),
        ("pr:{Qwen/Q-8B}:w:12", m(ModelKey::Record(12))),
        ("pr:{Qwen/Q-8B}:sp:3", m(ModelKey::Spec(3))),
        (
            "pr:{Qwen/Q-8B}:rc_used",
            m(ModelKey::ResponseIndex(ResponseIndex::Used)),
        ),
        (entry.as_str(), m(ModelKey::ResponseEntry("0a".repeat(32)))),
        (
            "pr:{Qwen/Q-8B}:stage:3:ab_c-1",
            m(ModelKey::Stage(3, "ab_c-1".into())),
        ),
    ];
    for (key, want) in cases {
        assert_eq!(classify("pr", key.as_bytes()), want, "{key}");
    }
    for bad in [
        "pr:Qwen:ids",
        "pr:{m}ids",
        "pr:{m}:f:3a71",
        "pr:{m}:f:3A78",
        "pr:{m}:w:03",
        "pr:{m}:w:0",
        "pr:{m}:r:x",
        "pr:{m}:stage:3:",
        "pr:{m}:other",
        "pr:{m}:rc:0A",
        "pr:{m}:rc:abc",
        "pr:{a b}:ids",
        "pr:{}:ids",
    ] {
        assert!(
            matches!(classify("pr", bad.as_bytes()), KeyClass::Unknown(_)),
            "{bad}"
        );
    }
}

#[test]
fn buckets_round_the_fourth_digit() {
    assert_eq!(bucket_of(b"3a7f0c2e91d455b0"), 0x3a78);
    assert_eq!(bucket_of(b"3a710c2e91d455b0"), 0x3a70);
    assert_eq!(bucket_of(b"ffffffffffffffff"), 0xfff8);
    assert!(valid_hash(b"3a7f0c2e91d455b0"));
    assert!(!valid_hash(b"3A7F0C2E91D455B0"));
    assert!(!valid_hash(b"3a7f"));
    assert_eq!(glob_escape("a*b[c]?\\"), "a\\*b\\[c\\]\\?\\\\");
}
