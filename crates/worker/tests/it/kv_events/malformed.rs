//! Bad input: every malformed payload or frame set is an error, never a
//! panic; unknown event kinds and fields are kept, not fatal.

use bytes::Bytes;
use protocol::kv_events::{
    DecodeError, DecodeLimits, EngineHash, KvEvent, PubMessage, ReplayReply, ReplayRequest,
    WireError, decode_batch, decode_batch_with_limits, encode_batch,
};
use rmpv::Value as V;

use super::generic::{KV_EVENTS, array, frames, load};

/// Every recorded payload, from all variants (loaded once).
pub fn recorded_payloads() -> &'static [Vec<u8>] {
    static PAYLOADS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    PAYLOADS.get_or_init(|| {
        let doc = load(KV_EVENTS);
        array(&doc["variants"], "variants")
            .iter()
            .flat_map(|v| array(&v["pub_messages"], "pub_messages").clone())
            .map(|m| frames(&m["frames_hex"])[2].to_vec())
            .collect()
    })
}

/// Encodes a hand-built value with `rmpv` (independent of our writer).
fn pack(value: &V) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, value).expect("rmpv encodes");
    out
}

fn s(text: &str) -> V {
    V::from(text)
}

fn batch_of(events: Vec<V>) -> Vec<u8> {
    pack(&V::Array(vec![V::F64(1.5), V::Array(events), V::from(0)]))
}

fn map(entries: Vec<(&str, V)>) -> V {
    V::Map(entries.into_iter().map(|(k, v)| (s(k), v)).collect())
}

fn removed(hashes: V) -> V {
    map(vec![
        ("type", s("BlockRemoved")),
        ("block_hashes", hashes),
        ("medium", V::Nil),
    ])
}

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
fn unknown_events_and_fields_are_kept_and_old_shapes_accepted() {
    let future_event = map(vec![
        ("type", s("BlockSnapshot")),
        ("items", V::Array(vec![V::from(1)])),
    ]);
    let future_field = map(vec![
        ("type", s("BlockRemoved")),
        ("block_hashes", V::Array(vec![V::from(-1), V::from(5)])),
        ("medium", s("GPU")),
        ("remaining_copy_counts", V::Array(vec![V::from(2)])),
    ]);
    // vLLM 0.9-era positional events (no medium) and a two-element batch.
    let old = V::Array(vec![
        s("BlockStored"),
        V::Array(vec![V::from(9)]),
        V::Nil,
        V::Array(vec![V::from(1), V::from(2)]),
        V::from(2),
        V::Nil,
    ]);
    let old_removed = V::Array(vec![
        s("BlockRemoved"),
        V::Array(vec![V::from(9)]),
        s("GPU"),
        V::from(0),
        s("x"),
        s("y"),
        s("z"),
    ]);
    let payload = pack(&V::Array(vec![
        V::from(1700000000u32),
        V::Array(vec![future_event.clone(), future_field, old, old_removed]),
    ]));
    let batch = decode_batch(&payload).expect("decodes");
    assert_eq!(batch.ts, 1_700_000_000.0);
    assert_eq!(batch.data_parallel_rank, None);
    match &batch.events[0] {
        KvEvent::Unknown(u) => {
            assert_eq!((u.tag.as_str(), &u.raw), ("BlockSnapshot", &future_event))
        }
        other => panic!("{other:?}"),
    }
    let KvEvent::BlockRemoved(removed) = &batch.events[1] else {
        panic!("{:?}", batch.events[1])
    };
    // Negative ints (old engines' Python hash()) as two's complement.
    assert_eq!(
        removed.block_hashes,
        vec![EngineHash::Int(u64::MAX), EngineHash::Int(5)]
    );
    assert_eq!(
        removed.other_fields,
        vec![(
            "remaining_copy_counts".to_owned(),
            V::Array(vec![V::from(2)])
        )]
    );
    let KvEvent::BlockStored(stored) = &batch.events[2] else {
        panic!("{:?}", batch.events[2])
    };
    assert_eq!(
        (
            stored.token_ids.as_slice(),
            stored.block_size,
            stored.medium.as_deref()
        ),
        (&[1, 2][..], 2, None)
    );
    let KvEvent::BlockRemoved(removed) = &batch.events[3] else {
        panic!("{:?}", batch.events[3])
    };
    assert_eq!(
        (
            removed.group_idx,
            removed.locality.as_deref(),
            removed.ownership.as_deref()
        ),
        (Some(0), Some("x"), Some("y"))
    );
    // Unknown events and fields survive a round trip.
    let again = decode_batch(&encode_batch(&batch).expect("encodes")).expect("decodes");
    assert_eq!(again.events[..2], batch.events[..2]);
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

/// A batch encoded as a map (`{"ts", "events", "data_parallel_rank"}`, as
/// msgspec writes a struct without `array_like`) decodes as the array form
/// does, keys in any order; unknown keys at the batch level are skipped and
/// counted, at every level (`unknown_counts`).
#[test]
fn a_map_batch_decodes_as_the_array_and_unknown_keys_are_counted() {
    for payload in recorded_payloads() {
        let want = decode_batch(payload).unwrap();
        let V::Array(items) = rmpv::decode::read_value(&mut &payload[..]).unwrap() else {
            panic!("a recorded batch is an array");
        };
        let mut entries = vec![
            (s("events"), items[1].clone()),
            (s("future_field"), V::Array(vec![V::from(1), s("x")])),
            (s("ts"), items[0].clone()),
        ];
        if let Some(rank) = items.get(2) {
            entries.push((s("data_parallel_rank"), rank.clone()));
        }
        let got = decode_batch(&pack(&V::Map(entries))).unwrap();
        assert_eq!(got.ts, want.ts);
        assert_eq!(got.events, want.events);
        assert_eq!(got.data_parallel_rank, want.data_parallel_rank);
        assert_eq!(
            got.unknown_counts().0,
            1,
            "the unknown batch key is counted"
        );
    }
    // A trailing element of an array batch counts the same way.
    let four = pack(&V::Array(vec![
        V::F64(1.0),
        V::Array(vec![]),
        V::from(0),
        s("new"),
    ]));
    assert_eq!(decode_batch(&four).unwrap().unknown_counts(), (1, 0, 0));
    // Unknown fields of events and unknown events are counted too.
    let event = map(vec![
        ("type", s("BlockRemoved")),
        ("block_hashes", V::Array(vec![V::from(1u64)])),
        ("medium", V::Nil),
        ("new_field", V::from(3)),
    ]);
    let newer = map(vec![("type", s("BlockMoved")), ("to", s("cpu"))]);
    let b = decode_batch(&batch_of(vec![event, newer])).unwrap();
    assert_eq!(b.unknown_counts(), (0, 1, 1));
    // A map batch still needs its ts and events, once each.
    let bad = [
        map(vec![("events", V::Array(vec![]))]),
        map(vec![("ts", V::F64(1.0))]),
        map(vec![
            ("ts", V::F64(1.0)),
            ("events", V::Array(vec![])),
            ("ts", V::F64(2.0)),
        ]),
    ];
    for b in bad {
        assert!(decode_batch(&pack(&b)).is_err(), "{b}");
    }
}
