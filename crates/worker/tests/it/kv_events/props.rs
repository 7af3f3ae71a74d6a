//! Property tests: random and corrupted input never panics, and encoding
//! then decoding any batch gives it back. Structured fuzzing (at the end):
//! MessagePack shaped like batches and frames with a right envelope, so
//! that the decoder's deeper paths see bad input too; what decodes
//! re-encodes stably, and frames round-trip.

use bytes::Bytes;
use proptest::prelude::*;
use protocol::kv_events::{
    BlockRemoved, BlockStored, DecodeLimits, EngineHash, KvEvent, KvEventBatch, PubMessage,
    ReplayReply, ReplayRequest, decode_batch, decode_batch_with_limits, encode_batch,
};
use rmpv::Value as V;

use super::malformed::recorded_payloads;

fn arb_hash() -> impl Strategy<Value = EngineHash> {
    prop_oneof![
        any::<u64>().prop_map(EngineHash::Int),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(EngineHash::Bytes),
    ]
}

fn arb_event() -> impl Strategy<Value = KvEvent> {
    let text = proptest::option::of("[a-zA-Z0-9@:_-]{0,40}");
    let stored = (
        proptest::collection::vec(arb_hash(), 0..20),
        proptest::option::of(arb_hash()),
        proptest::collection::vec(any::<u32>(), 0..40),
        any::<u32>(),
        proptest::option::of(any::<i64>()),
        (text.clone(), text.clone(), text.clone()),
        proptest::option::of(any::<i64>()),
    )
        .prop_map(
            |(
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                lora_id,
                (medium, lora_name, session_id),
                group_idx,
            )| {
                KvEvent::BlockStored(BlockStored {
                    block_hashes,
                    parent_block_hash,
                    token_ids,
                    block_size,
                    lora_id,
                    medium,
                    lora_name,
                    session_id,
                    group_idx,
                    extra_keys: lora_id
                        .map(|id| vec![V::Nil, V::Array(vec![V::from("mm"), V::from(id)])]),
                    ..BlockStored::default()
                })
            },
        );
    let removed = (
        proptest::collection::vec(arb_hash(), 0..20),
        text,
        proptest::option::of(any::<i64>()),
    )
        .prop_map(|(block_hashes, medium, group_idx)| {
            KvEvent::BlockRemoved(BlockRemoved {
                block_hashes,
                medium,
                group_idx,
                ..BlockRemoved::default()
            })
        });
    prop_oneof![stored, removed, Just(KvEvent::AllBlocksCleared)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_batch(&bytes);
    }

    #[test]
    fn corrupted_recordings_never_panic(index in 0usize..12, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut payload = recorded_payloads()[index].clone();
        for (at, byte) in flips {
            let len = payload.len();
            payload[at % len] = byte;
        }
        let _ = decode_batch(&payload);
    }

    #[test]
    fn random_frames_never_panic(parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 0..6)) {
        let frames: Vec<Bytes> = parts.into_iter().map(Bytes::from).collect();
        let _ = PubMessage::from_frames(frames.clone());
        let _ = ReplayReply::from_dealer_frames(frames.clone());
        let _ = ReplayRequest::from_router_frames(frames);
    }

    #[test]
    fn encode_then_decode_is_identity(
        ts in -1e12f64..1e12,
        events in proptest::collection::vec(arb_event(), 0..6),
        rank in proptest::option::of(any::<i64>()),
    ) {
        let batch = KvEventBatch { ts, events, data_parallel_rank: rank , extra_fields: 0};
        let bytes = encode_batch(&batch).expect("encodes");
        prop_assert_eq!(decode_batch(&bytes).expect("decodes"), batch);
    }
}

// Structured fuzzing: random bytes rarely get past the first few markers,
// so these build MessagePack that is valid as MessagePack and shaped like
// a batch, with every field sometimes of any type, and frames whose
// envelope is right but whose content is not.

/// Any MessagePack value, a few levels deep.
fn arb_msgpack() -> impl Strategy<Value = V> {
    let leaf = prop_oneof![
        Just(V::Nil),
        any::<bool>().prop_map(V::Boolean),
        any::<i64>().prop_map(V::from),
        any::<u64>().prop_map(V::from),
        any::<f64>().prop_map(V::F64),
        any::<f32>().prop_map(V::F32),
        ".{0,12}".prop_map(V::from),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(V::Binary),
        (any::<i8>(), proptest::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(tag, data)| V::Ext(tag, data)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(V::Array),
            proptest::collection::vec((inner.clone(), inner), 0..5).prop_map(V::Map),
        ]
    })
}

/// A value of a field: mostly of the right kind, sometimes anything.
fn field(right: impl Strategy<Value = V>) -> impl Strategy<Value = V> {
    prop_oneof![12 => right, 1 => arb_msgpack()]
}

fn arb_hashes_value() -> impl Strategy<Value = V> {
    field(
        proptest::collection::vec(
            prop_oneof![
                any::<u64>().prop_map(V::from),
                any::<i64>().prop_map(V::from),
                proptest::collection::vec(any::<u8>(), 0..40).prop_map(V::Binary),
            ],
            0..8,
        )
        .prop_map(V::Array),
    )
}

/// An event as a map (vLLM >= 0.24) or a positional array (before), with
/// a known or unknown tag.
fn arb_event_value() -> impl Strategy<Value = V> {
    let tag = prop_oneof![
        4 => prop_oneof![
            Just("BlockStored"),
            Just("BlockRemoved"),
            Just("AllBlocksCleared"),
        ]
        .prop_map(V::from),
        1 => arb_msgpack(),
    ];
    let fields = (
        arb_hashes_value(),
        field(prop_oneof![Just(V::Nil), any::<u64>().prop_map(V::from)]),
        field(proptest::collection::vec(any::<u32>().prop_map(V::from), 0..20).prop_map(V::Array)),
        field(any::<u32>().prop_map(V::from)),
        field(prop_oneof![Just(V::Nil), any::<i64>().prop_map(V::from)]),
        field(prop_oneof![
            Just(V::Nil),
            Just(V::from("GPU")),
            ".{0,8}".prop_map(V::from)
        ]),
        field(prop_oneof![Just(V::Nil), arb_msgpack()]),
        proptest::collection::vec(("[a-z_]{1,12}", arb_msgpack()), 0..3),
    );
    (tag, fields, any::<bool>(), 0usize..9).prop_map(
        |(tag, (hashes, parent, tokens, size, lora, medium, extra, unknown), as_map, arity)| {
            if as_map {
                let mut entries = vec![
                    (V::from("type"), tag),
                    (V::from("block_hashes"), hashes),
                    (V::from("parent_block_hash"), parent),
                    (V::from("token_ids"), tokens),
                    (V::from("block_size"), size),
                    (V::from("lora_id"), lora),
                    (V::from("medium"), medium),
                    (V::from("extra_keys"), extra),
                ];
                entries.extend(unknown.into_iter().map(|(k, v)| (V::from(k), v)));
                // Drop some fields (the decoder must say which is missing).
                entries.truncate(arity.max(1) + entries.len().saturating_sub(9));
                V::Map(entries)
            } else {
                let mut items = vec![tag, hashes, parent, tokens, size, lora, medium, extra];
                items.truncate(arity);
                V::Array(items)
            }
        },
    )
}

fn arb_batch_value() -> impl Strategy<Value = V> {
    (
        field(any::<f64>().prop_map(V::F64)),
        field(proptest::collection::vec(arb_event_value(), 0..5).prop_map(V::Array)),
        proptest::option::of(field(any::<i64>().prop_map(V::from))),
    )
        .prop_map(|(ts, events, rank)| {
            let mut items = vec![ts, events];
            items.extend(rank);
            V::Array(items)
        })
}

fn pack(value: &V) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, value).expect("rmpv encodes");
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Batch-shaped MessagePack decodes or errors, never panics, within any
    /// limits; what decodes re-encodes, and decodes again to the same.
    #[test]
    fn structured_batches_never_panic_and_re_encode_stably(
        batch in arb_batch_value(),
        tight in any::<bool>(),
    ) {
        let bytes = pack(&batch);
        let limits = if tight {
            DecodeLimits {
                max_events: 2,
                max_hashes_per_event: 3,
                max_tokens_per_event: 5,
                max_opaque_items: 8,
                max_opaque_depth: 2,
                ..DecodeLimits::default()
            }
        } else {
            DecodeLimits::default()
        };
        if let Ok(decoded) = decode_batch_with_limits(&bytes, &limits)
            && let Ok(again) = encode_batch(&decoded)
        {
            let redecoded = decode_batch(&again);
            prop_assert!(redecoded.is_ok(), "re-encoded batch does not decode: {:?}", redecoded);
            if let Ok(r) = redecoded {
                prop_assert_eq!(r, decoded);
            }
        }
    }

    /// Frames with a right envelope (frame count, 8-byte sequence) and any
    /// content: parsed without panic, and their payloads decoded likewise.
    #[test]
    fn structured_frames_never_panic(
        topic in prop_oneof![
            ".{0,12}".prop_map(|t| Bytes::from(t.into_bytes())),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(Bytes::from),
        ],
        seq_width in prop_oneof![4 => Just(8usize), 1 => 0usize..12],
        seq in any::<u64>(),
        payload in prop_oneof![
            arb_batch_value().prop_map(|v| Bytes::from(pack(&v))),
            arb_msgpack().prop_map(|v| Bytes::from(pack(&v))),
        ],
        delimiter_len in prop_oneof![4 => Just(0usize), 1 => 1usize..4],
    ) {
        let mut seq_frame = vec![0u8; seq_width.saturating_sub(8)];
        let be = seq.to_be_bytes();
        seq_frame.extend_from_slice(&be[8usize.saturating_sub(seq_width)..]);
        let seq_frame = Bytes::from(seq_frame);
        let pub_frames = vec![topic.clone(), seq_frame.clone(), payload.clone()];
        if let Ok(m) = PubMessage::from_frames(pub_frames) {
            prop_assert_eq!(seq_width, 8);
            prop_assert_eq!(m.seq, seq);
            let _ = decode_batch(&m.payload);
        }
        let delimiter = Bytes::from(vec![0u8; delimiter_len]);
        for frames in [
            vec![delimiter.clone(), seq_frame.clone(), payload.clone()],
            vec![delimiter.clone(), topic.clone(), seq_frame.clone(), payload.clone()],
        ] {
            if let Ok(ReplayReply::Batch { payload, .. }) = ReplayReply::from_dealer_frames(frames) {
                let _ = decode_batch(&payload);
            }
        }
    }

    /// What the publisher writes, the parsers read back exactly.
    #[test]
    fn frames_round_trip(
        topic in ".{0,16}",
        seq in any::<u64>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        identity in proptest::collection::vec(any::<u8>(), 1..8),
        start in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let payload = Bytes::from(payload);
        let m = PubMessage { topic: topic.clone(), seq, payload: payload.clone() };
        prop_assert_eq!(PubMessage::from_frames(m.clone().into_frames()), Ok(m));

        // A replay batch as the ROUTER sends it, less the identity frame the
        // DEALER never sees.
        let frames = protocol::kv_events::replay_batch_frames(
            Bytes::from(identity.clone()), &topic, seq, payload.clone(),
        );
        let got = ReplayReply::from_dealer_frames(frames[1..].to_vec());
        if seq == protocol::kv_events::REPLAY_END_SEQ {
            prop_assert_eq!(got, Ok(ReplayReply::End));
        } else {
            prop_assert_eq!(got, Ok(ReplayReply::Batch { topic: Some(topic), seq, payload }));
        }

        // A start sequence of any width, read as vLLM's int.from_bytes.
        let request = vec![Bytes::from(identity.clone()), Bytes::new(), Bytes::from(start.clone())];
        let parsed = ReplayRequest::from_router_frames(request);
        let value = start.iter().fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
        let want = u64::try_from(value).unwrap_or(u64::MAX);
        prop_assert_eq!(parsed.map(|r| (r.identity, r.start_seq)), Ok((Bytes::from(identity), want)));
    }
}
