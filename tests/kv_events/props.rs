//! Property tests: random and corrupted input never panics, and encoding
//! then decoding any batch gives it back.

use bytes::Bytes;
use prefix_router::kv_events::{
    BlockRemoved, BlockStored, EngineHash, KvEvent, KvEventBatch, PubMessage, ReplayReply,
    ReplayRequest, decode_batch, encode_batch,
};
use proptest::prelude::*;
use rmpv::Value as V;

use crate::malformed::recorded_payloads;

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
        let batch = KvEventBatch { ts, events, data_parallel_rank: rank };
        let bytes = encode_batch(&batch).expect("encodes");
        prop_assert_eq!(decode_batch(&bytes).expect("decodes"), batch);
    }
}
