//! What is kept, not fatal: unknown events and fields, old shapes, a
//! batch as a map with unknown keys.

use super::*;

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
