//! Tests of the re-check probes.

use super::*;

/// The re-check of a prefill count asks about its incarnation (`18`),
/// not `p18`: else a count whose incarnation is being purged would be
/// confirmed as one of an unknown incarnation.
#[test]
fn a_prefill_count_is_rechecked_against_its_incarnation() {
    let keys = KeySpace::new("it").unwrap();
    let mk = ModelKeys::new(&keys, "m");
    for field in ["p18:router-1", "18:router-1"] {
        let mut pipe = redis::pipe();
        let probe = Probe::ViewField {
            field: field.to_owned(),
        };
        assert_eq!(probe.push(&keys, Some(&mk), Some("m"), &mut pipe), 4);
        let packed = String::from_utf8(pipe.get_packed_pipeline()).unwrap();
        assert!(
            packed.contains("ZSCORE\r\n$13\r\nit:{m}:leases\r\n$2\r\n18\r\n"),
            "{packed:?}"
        );
        assert!(
            packed.contains("SISMEMBER\r\n$12\r\nit:{m}:purge\r\n$2\r\n18\r\n"),
            "{packed:?}"
        );
        assert!(packed.contains("$8\r\nrouter-1\r\n"), "{packed:?}");
    }
}
