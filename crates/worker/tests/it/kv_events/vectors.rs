//! The recorded vLLM messages: decoding, replay frames, and byte-exact
//! encoding.

use bytes::Bytes;
use protocol::kv_events::{
    EngineHash, KvEvent, PubMessage, REPLAY_END_SEQ, ReplayReply, ReplayRequest, decode_batch,
    encode_batch, replay_request_frames,
};
use serde_json::Value;

use super::generic::{
    FieldOrder, KV_EVENTS, LIVE_CAPTURE, array, assert_batch_matches, frames, generic_decode, load,
};

/// Every recorded PUB message of one variant: `(seq, frames, generic decode)`.
fn pub_messages(variant: &Value) -> Vec<(u64, Vec<Bytes>, &Value)> {
    array(&variant["pub_messages"], "pub_messages")
        .iter()
        .map(|m| {
            (
                m["seq"].as_u64().expect("seq"),
                frames(&m["frames_hex"]),
                &m["payload_decoded_generic"],
            )
        })
        .collect()
}

fn variants(doc: &Value) -> &Vec<Value> {
    array(&doc["variants"], "variants")
}

fn name(variant: &Value) -> String {
    format!(
        "vLLM {} int-hashes={}",
        variant["vllm_version"].as_str().unwrap_or("?"),
        variant["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"]
            .as_str()
            .unwrap_or("?")
    )
}

#[test]
fn every_recorded_pub_message_decodes_to_the_recorded_events() {
    let doc = load(KV_EVENTS);
    let (mut messages, mut fields) = (0, 0);
    let mut shapes = std::collections::BTreeSet::new();
    for variant in variants(&doc) {
        let order = FieldOrder::from_variant(variant);
        let topic = variant["topic"].as_str().expect("topic");
        for (seq, frames, expected) in pub_messages(variant) {
            let ctx = format!("{} seq {seq}", name(variant));
            let message = PubMessage::from_frames(frames).expect("3 frames");
            assert_eq!((message.topic.as_str(), message.seq), (topic, seq), "{ctx}");
            // The independent decoder agrees with the recording's decode...
            assert_eq!(&generic_decode(&message.payload), expected, "{ctx}: rmpv");
            // ...and so does ours, field by field.
            let batch = decode_batch(&message.payload).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            fields += assert_batch_matches(expected, &batch, &order, &ctx);
            messages += 1;
            for event in array(&expected[1], "events") {
                let hash = event.get("block_hashes").or_else(|| event.get(1));
                shapes.insert((
                    event.is_object(),
                    hash.and_then(|h| h.get(0)).map(Value::is_object),
                ));
            }
        }
    }
    assert_eq!(messages, variants(&doc).len() * 3, "3 messages per variant");
    assert!(fields > 100, "only {fields} fields compared");
    // Map and array events, each with int and with bytes hashes.
    for shape in [
        (true, Some(false)),
        (true, Some(true)),
        (false, Some(false)),
        (false, Some(true)),
    ] {
        assert!(
            shapes.contains(&shape),
            "no event of shape {shape:?} in the vectors"
        );
    }
}

#[test]
fn live_capture_payloads_decode_like_a_generic_decoder_says() {
    let doc = load(LIVE_CAPTURE);
    // The live capture records no field order; it is vLLM 0.33 like this one.
    let kv = load(KV_EVENTS);
    let v033 = variants(&kv)
        .iter()
        .find(|v| v["vllm_version"] == doc["vllm_version"]);
    let order = FieldOrder::from_variant(v033.expect("a 0.33 variant"));
    let topic = doc["topic"].as_str().expect("topic");
    let mut payloads = Vec::new();
    for reply in array(&doc["replay_dealer_received_frames_hex"], "dealer replies") {
        if let ReplayReply::Batch {
            topic: t,
            seq,
            payload,
        } = ReplayReply::from_dealer_frames(frames(reply)).expect("dealer reply")
        {
            assert_eq!(t.as_deref(), Some(topic));
            payloads.push((seq, payload));
        }
    }
    // With the delimiter stripped, a REQ client's reply has the PUB shape.
    for reply in array(&doc["replay_req_received_frames_hex"], "req replies") {
        let message = PubMessage::from_frames(frames(reply)).expect("REQ reply");
        assert_eq!(message.topic, topic);
        payloads.push((message.seq, message.payload));
    }
    assert_eq!(payloads.len(), 3, "2 DEALER batches + 1 REQ batch");
    for (seq, payload) in payloads {
        let ctx = format!("live seq {seq}");
        let batch = decode_batch(&payload).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_batch_matches(&generic_decode(&payload), &batch, &order, &ctx);
        // Tiny hashes (fixint, uint8, uint16) must round-trip in their width.
        assert_eq!(
            encode_batch(&batch).expect("encodes"),
            payload.as_ref(),
            "{ctx}: re-encode"
        );
    }
}

#[test]
fn int_and_bytes_hash_variants_agree_on_the_router_hash() {
    let doc = load(KV_EVENTS);
    let all = variants(&doc);
    let mut compared = 0;
    for version in ["0.33.0", "0.23.0"] {
        let pick = |ints: &str| {
            all.iter()
                .find(|v| {
                    v["vllm_version"] == version
                        && v["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"].as_str() == Some(ints)
                })
                .unwrap_or_else(|| panic!("variant {version} {ints}"))
        };
        let (ints, digests) = (pick("unset (default 1)"), pick("0"));
        for ((_, int_frames, _), (_, bin_frames, _)) in
            pub_messages(ints).into_iter().zip(pub_messages(digests))
        {
            let a = decode_batch(&int_frames[2]).expect("int variant");
            let b = decode_batch(&bin_frames[2]).expect("bytes variant");
            for (ea, eb) in a.events.iter().zip(&b.events) {
                let (ha, hb) = match (ea, eb) {
                    (KvEvent::BlockStored(x), KvEvent::BlockStored(y)) => {
                        (&x.block_hashes, &y.block_hashes)
                    }
                    (KvEvent::BlockRemoved(x), KvEvent::BlockRemoved(y)) => {
                        (&x.block_hashes, &y.block_hashes)
                    }
                    _ => continue,
                };
                for (x, y) in ha.iter().zip(hb) {
                    assert!(matches!(x, EngineHash::Int(_)) && matches!(y, EngineHash::Bytes(_)));
                    assert_eq!(x.to_block_hash(), y.to_block_hash(), "{version}");
                    compared += 1;
                }
            }
        }
    }
    assert!(compared >= 12, "only {compared} hashes compared");
}

#[test]
fn recorded_replay_exchanges_parse() {
    let doc = load(KV_EVENTS);
    let mut shapes = std::collections::BTreeSet::new();
    for variant in variants(&doc) {
        let ctx = name(variant);
        let request = frames(&variant["replay_request_frames_hex_sent_by_DEALER"]);
        // What the ROUTER sees: the DEALER's identity, then the request.
        let mut router_view = vec![Bytes::from_static(b"client-7")];
        router_view.extend(request.iter().cloned());
        let parsed = ReplayRequest::from_router_frames(router_view).expect("request");
        assert_eq!(
            request,
            replay_request_frames(parsed.start_seq),
            "{ctx}: request bytes"
        );
        assert_eq!(parsed.identity, Bytes::from_static(b"client-7"));

        let buffered: Vec<_> = pub_messages(variant)
            .into_iter()
            .filter(|(seq, _, _)| *seq >= parsed.start_seq)
            .collect();
        let replies = array(
            &variant["replay_reply_messages_received_by_DEALER"],
            "replies",
        );
        assert_eq!(
            replies.len(),
            buffered.len() + 1,
            "{ctx}: one reply per batch, then end"
        );
        for (reply, (seq, pub_frames, _)) in replies.iter().zip(&buffered) {
            let raw = frames(reply);
            let shape = raw.len();
            match ReplayReply::from_dealer_frames(raw).expect("reply") {
                ReplayReply::Batch {
                    topic,
                    seq: got,
                    payload,
                } => {
                    assert_eq!(got, *seq, "{ctx}");
                    assert_eq!(
                        payload, pub_frames[2],
                        "{ctx}: replayed payload = published"
                    );
                    let expected_topic =
                        (shape == 4).then(|| variant["topic"].as_str().unwrap_or("").to_owned());
                    assert_eq!(topic, expected_topic, "{ctx}");
                }
                ReplayReply::End => panic!("{ctx}: end marker too early"),
            }
            shapes.insert(shape);
        }
        let end = frames(replies.last().expect("end marker"));
        assert_eq!(end[end.len() - 2], REPLAY_END_SEQ.to_be_bytes().as_slice());
        assert_eq!(
            ReplayReply::from_dealer_frames(end).expect("end"),
            ReplayReply::End,
            "{ctx}"
        );
    }
    assert_eq!(
        shapes,
        [3, 4].into(),
        "both reply shapes (< 0.26 and >= 0.26) are covered"
    );
}

#[test]
fn live_capture_replay_exchange_parses() {
    let doc = load(LIVE_CAPTURE);
    let request = frames(&doc["replay_request_dealer_frames_hex"]);
    let mut router_view = vec![Bytes::from_static(b"id")];
    router_view.extend(request);
    let start = ReplayRequest::from_router_frames(router_view)
        .expect("request")
        .start_seq;
    let replies = array(&doc["replay_dealer_received_frames_hex"], "replies");
    let parsed: Vec<_> = replies
        .iter()
        .map(|r| ReplayReply::from_dealer_frames(frames(r)).expect("reply"))
        .collect();
    let (last, batches) = parsed.split_last().expect("replies");
    assert_eq!(*last, ReplayReply::End);
    let seqs: Vec<u64> = batches
        .iter()
        .map(|b| match b {
            ReplayReply::Batch { seq, .. } => *seq,
            ReplayReply::End => panic!("end marker before the last reply"),
        })
        .collect();
    let expected: Vec<u64> = (start..start + seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "consecutive from the requested start");
}

#[test]
fn encoding_a_decoded_033_payload_reproduces_its_exact_bytes() {
    let doc = load(KV_EVENTS);
    let mut checked = 0;
    for variant in variants(&doc) {
        let is_map_format = variant["EventBatch_struct_config"].is_object()
            && variant["KVCacheEvent_struct_config"]["array_like"] == Value::Bool(false);
        for (seq, frames, _) in pub_messages(variant) {
            let ctx = format!("{} seq {seq}", name(variant));
            let batch = decode_batch(&frames[2]).expect("decodes");
            let encoded = encode_batch(&batch).expect("encodes");
            if is_map_format {
                assert_eq!(hex::encode(&encoded), hex::encode(&frames[2]), "{ctx}");
                checked += 1;
            } else {
                // Array-format input comes out in the map format; it must
                // still mean the same.
                assert_eq!(decode_batch(&encoded).expect("re-decodes"), batch, "{ctx}");
            }
        }
    }
    assert_eq!(checked, 6, "3 messages x (int, bytes) hashes of vLLM 0.33");
}
