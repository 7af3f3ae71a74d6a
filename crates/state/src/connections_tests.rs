//! Unit tests of `connections`: the URL forms.

use super::*;

#[test]
fn valkey_schemes_are_aliases() {
    assert_eq!(normalize_url("valkey://h:1/0").unwrap(), "redis://h:1/0");
    assert_eq!(
        normalize_url("valkeys://u:p@h:1").unwrap(),
        "rediss://u:p@h:1"
    );
    assert_eq!(normalize_url("redis://h:1").unwrap(), "redis://h:1");
    assert!(normalize_url("http://h:1").is_err());
    assert!(normalize_url("h:1").is_err());
}

#[test]
fn several_urls_are_cluster_seeds() {
    assert_eq!(cluster_seeds("redis://a:1").unwrap(), None);
    assert_eq!(
        cluster_seeds("valkey://a:1, redis://b:2,").unwrap(),
        Some(vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()])
    );
    assert!(cluster_seeds("redis://a:1,http://b:2").is_err());
}
