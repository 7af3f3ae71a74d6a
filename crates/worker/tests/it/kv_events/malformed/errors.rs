//! Errors, never panics: every truncation of a recorded payload, wrong
//! shapes and types, lying lengths and limits, bad frame sets.

use super::*;

#[test]
fn every_truncation_of_every_recorded_payload_is_an_error() {
    let payloads = recorded_payloads();
    assert_eq!(payloads.len(), 12);
    for payload in payloads {
        assert!(decode_batch(payload).is_ok());
        for len in 0..payload.len() {
            assert!(
                decode_batch(&payload[..len]).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
    }
}

#[test]
fn wrong_shapes_and_types_are_errors() {
    let hashes = V::Array(vec![V::from(1u64)]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "map batch without events",
            pack(&map(vec![("ts", V::F64(1.0))])),
        ),
        ("batch too short", pack(&V::Array(vec![V::F64(1.0)]))),
        (
            "ts is a string",
            pack(&V::Array(vec![s("now"), V::Array(vec![]), V::Nil])),
        ),
        (
            "events is nil",
            pack(&V::Array(vec![V::F64(1.0), V::Nil, V::Nil])),
        ),
        ("event is an int", batch_of(vec![V::from(7)])),
        ("empty array event", batch_of(vec![V::Array(vec![])])),
        (
            "array tag is an int",
            batch_of(vec![V::Array(vec![V::from(1)])]),
        ),
        (
            "map without type",
            batch_of(vec![map(vec![("block_hashes", hashes.clone())])]),
        ),
        (
            "type is an int",
            batch_of(vec![map(vec![("type", V::from(3))])]),
        ),
        (
            "missing block_hashes",
            batch_of(vec![map(vec![("type", s("BlockRemoved"))])]),
        ),
        (
            "hash is a string",
            batch_of(vec![removed(V::Array(vec![s("abc")]))]),
        ),
        ("hashes is an int", batch_of(vec![removed(V::from(5))])),
        (
            "hash is a float",
            batch_of(vec![removed(V::Array(vec![V::F64(1.0)]))]),
        ),
        (
            "non-string key",
            batch_of(vec![V::Map(vec![(V::from(1), V::from(2))])]),
        ),
        (
            "duplicate field",
            batch_of(vec![map(vec![
                ("type", s("BlockRemoved")),
                ("block_hashes", hashes.clone()),
                ("block_hashes", hashes.clone()),
            ])]),
        ),
        (
            "negative token id",
            batch_of(vec![V::Array(vec![
                s("BlockStored"),
                hashes.clone(),
                V::Nil,
                V::Array(vec![V::from(-1)]),
                V::from(16),
            ])]),
        ),
        (
            "token id above u32",
            batch_of(vec![V::Array(vec![
                s("BlockStored"),
                hashes.clone(),
                V::Nil,
                V::Array(vec![V::from(1u64 << 32)]),
                V::from(16),
            ])]),
        ),
        (
            "block_size is a string",
            batch_of(vec![V::Array(vec![
                s("BlockStored"),
                hashes.clone(),
                V::Nil,
                V::Array(vec![]),
                s("16"),
            ])]),
        ),
        (
            "array BlockStored without block_size",
            batch_of(vec![V::Array(vec![
                s("BlockStored"),
                hashes.clone(),
                V::Nil,
                V::Array(vec![]),
            ])]),
        ),
        (
            "rank is a string",
            pack(&V::Array(vec![V::F64(1.0), V::Array(vec![]), s("0")])),
        ),
        ("invalid utf-8 type", {
            let mut bytes = batch_of(vec![map(vec![("type", s("BlockRemovxd"))])]);
            let at = bytes.len() - 3;
            bytes[at] = 0xff;
            bytes
        }),
        (
            "reserved marker",
            vec![0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0xc1, 0x00],
        ),
        ("trailing bytes", {
            let mut bytes = batch_of(vec![]);
            bytes.push(0xc0);
            bytes
        }),
    ];
    for (what, payload) in cases {
        let result = decode_batch(&payload);
        assert!(result.is_err(), "{what}: decoded to {result:?}");
        // Errors name their place.
        assert!(!result.unwrap_err().to_string().is_empty());
    }
}

#[test]
fn lying_lengths_and_limits_fail_fast() {
    // An array header claiming 2^32-1 events in a 15-byte payload.
    let bomb = [
        0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff,
    ];
    let err = decode_batch(&bomb).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Wire {
                source: WireError::TooLong { .. },
                ..
            }
        ),
        "{err}"
    );

    let limits = DecodeLimits {
        max_payload_bytes: 8,
        ..DecodeLimits::default()
    };
    let err = decode_batch_with_limits(&batch_of(vec![]), &limits).unwrap_err();
    assert!(matches!(err, DecodeError::PayloadTooLarge { .. }));

    let many = V::Array((0..10u64).map(V::from).collect());
    let limits = DecodeLimits {
        max_hashes_per_event: 9,
        ..DecodeLimits::default()
    };
    let err = decode_batch_with_limits(&batch_of(vec![removed(many)]), &limits).unwrap_err();
    assert!(matches!(
        err,
        DecodeError::Wire {
            source: WireError::TooLong { max: 9, .. },
            ..
        }
    ));

    // Deeply nested extra keys stop at the depth limit, without recursion
    // trouble.
    let mut deep = V::Nil;
    for _ in 0..200 {
        deep = V::Array(vec![deep]);
    }
    let stored = V::Array(vec![
        s("BlockStored"),
        V::Array(vec![V::from(1)]),
        V::Nil,
        V::Array(vec![]),
        V::from(16),
        V::Nil,
        V::Nil,
        V::Nil,
        V::Array(vec![deep]),
    ]);
    let err = decode_batch(&batch_of(vec![stored])).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::Wire {
                source: WireError::TooDeep { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn frame_errors() {
    let b = |x: &'static [u8]| Bytes::from_static(x);
    assert!(PubMessage::from_frames(vec![b(b""), b(b"\0\0\0\0\0\0\0\0")]).is_err());
    assert!(PubMessage::from_frames(vec![b(b""), b(b"\0\0\0\0\0\0\0"), b(b"")]).is_err());
    assert!(PubMessage::from_frames(vec![b(b"\xff"), b(b"\0\0\0\0\0\0\0\0"), b(b"")]).is_err());
    assert!(
        ReplayReply::from_dealer_frames(vec![b(b"x"), b(b"\0\0\0\0\0\0\0\0"), b(b"")]).is_err()
    );
    assert!(ReplayReply::from_dealer_frames(vec![b(b""), b(b"")]).is_err());
    assert!(ReplayReply::from_dealer_frames(vec![b(b""); 5]).is_err());
    assert!(ReplayRequest::from_router_frames(vec![b(b"id"), b(b"")]).is_err());
    // vLLM reads any width with int.from_bytes(..., "big").
    let start =
        |x| ReplayRequest::from_router_frames(vec![b(b"id"), b(b""), b(x)]).map(|r| r.start_seq);
    assert_eq!(start(b"\x01\x00"), Ok(256));
    assert_eq!(start(b""), Ok(0));
    assert_eq!(start(b"\x01\0\0\0\0\0\0\0\0"), Ok(u64::MAX));
}
