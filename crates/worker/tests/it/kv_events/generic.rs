//! Shared helpers: loading the vectors, and comparing a typed decode with a
//! generic one (the recording's `payload_decoded_generic`, or `rmpv`'s).
//!
//! The generic form is the recordings' own: MessagePack as JSON, with binary
//! values as `{"bytes_hex": "..."}`.

use bytes::Bytes;
use protocol::kv_events::{EngineHash, KvEvent, KvEventBatch};
use serde_json::{Map, Value, json};

pub const KV_EVENTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/vllm/kv_events.json"
);
pub const LIVE_CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/vllm/zmq_live_capture.json"
);

pub fn load(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

pub fn unhex(text: &str) -> Vec<u8> {
    hex::decode(text).unwrap_or_else(|e| panic!("bad hex {text:?}: {e}"))
}

/// A JSON array of hex strings as ZeroMQ frames.
pub fn frames(value: &Value) -> Vec<Bytes> {
    value
        .as_array()
        .expect("frames are an array")
        .iter()
        .map(|frame| Bytes::from(unhex(frame.as_str().expect("frame is a hex string"))))
        .collect()
}

pub fn array<'v>(value: &'v Value, what: &str) -> &'v Vec<Value> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{what} is not an array: {value}"))
}

/// The declared field order of each event type, as one variant records it.
pub struct FieldOrder {
    stored: Vec<String>,
    removed: Vec<String>,
    cleared: Vec<String>,
}

impl FieldOrder {
    pub fn from_variant(variant: &Value) -> Self {
        let names = |key: &str| -> Vec<String> {
            array(&variant[key], key)
                .iter()
                .map(|name| name.as_str().expect("field name").to_owned())
                .collect()
        };
        Self {
            stored: names("BlockStored_fields_in_order"),
            removed: names("BlockRemoved_fields_in_order"),
            cleared: names("AllBlocksCleared_fields_in_order"),
        }
    }

    fn for_tag(&self, tag: &str) -> &[String] {
        match tag {
            "BlockStored" => &self.stored,
            "BlockRemoved" => &self.removed,
            "AllBlocksCleared" => &self.cleared,
            other => panic!("unexpected event tag {other:?} in the vectors"),
        }
    }
}

/// `rmpv`'s decode in the recordings' generic JSON form.
pub fn rmpv_to_json(value: &rmpv::Value) -> Value {
    use rmpv::Value as V;
    match value {
        V::Nil => Value::Null,
        V::Boolean(b) => json!(b),
        V::Integer(i) => match (i.as_u64(), i.as_i64()) {
            (Some(u), _) => json!(u),
            (None, Some(s)) => json!(s),
            _ => unreachable!("rmpv integers are u64 or i64"),
        },
        V::F32(f) => json!(f64::from(*f)),
        V::F64(f) => json!(f),
        V::String(s) => json!(s.as_str().expect("utf-8 string")),
        V::Binary(b) => json!({ "bytes_hex": hex::encode(b) }),
        V::Array(items) => Value::Array(items.iter().map(rmpv_to_json).collect()),
        V::Map(entries) => {
            let mut map = Map::new();
            for (k, v) in entries {
                map.insert(k.as_str().expect("string key").to_owned(), rmpv_to_json(v));
            }
            Value::Object(map)
        }
        V::Ext(..) => panic!("no extension types in KV events"),
    }
}

/// An independent generic decode of a payload, with `rmpv`.
pub fn generic_decode(payload: &[u8]) -> Value {
    let mut reader = payload;
    let value = rmpv::decode::read_value(&mut reader).expect("rmpv decodes the payload");
    assert!(
        reader.is_empty(),
        "rmpv left {} trailing bytes",
        reader.len()
    );
    rmpv_to_json(&value)
}

fn hash_json(hash: &EngineHash) -> Value {
    match hash {
        EngineHash::Int(v) => json!(v),
        EngineHash::Bytes(b) => json!({ "bytes_hex": hex::encode(b) }),
    }
}

fn hashes_json(hashes: &[EngineHash]) -> Value {
    Value::Array(hashes.iter().map(hash_json).collect())
}

fn opt<T: serde::Serialize>(value: &Option<T>) -> Value {
    serde_json::to_value(value).expect("serializable")
}

fn other(fields: &[(String, rmpv::Value)], name: &str) -> Value {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map_or(Value::Null, |(_, v)| rmpv_to_json(v))
}

/// The typed decode's value of field `name`, in generic form (nil = null).
pub fn field_json(event: &KvEvent, name: &str) -> Value {
    match event {
        KvEvent::BlockStored(e) => match name {
            "block_hashes" => hashes_json(&e.block_hashes),
            "parent_block_hash" => e.parent_block_hash.as_ref().map_or(Value::Null, hash_json),
            "token_ids" => json!(e.token_ids),
            "block_size" => json!(e.block_size),
            "lora_id" => opt(&e.lora_id),
            "medium" => opt(&e.medium),
            "lora_name" => opt(&e.lora_name),
            "extra_keys" => e.extra_keys.as_ref().map_or(Value::Null, |keys| {
                Value::Array(keys.iter().map(rmpv_to_json).collect())
            }),
            "group_idx" => opt(&e.group_idx),
            "kv_cache_spec_kind" => opt(&e.kv_cache_spec_kind),
            "kv_cache_spec_sliding_window" => opt(&e.kv_cache_spec_sliding_window),
            "locality" => opt(&e.locality),
            "ownership" => opt(&e.ownership),
            "session_id" => opt(&e.session_id),
            "lookahead_token_ids" => e
                .lookahead_token_ids
                .as_ref()
                .map_or(Value::Null, rmpv_to_json),
            other_name => other(&e.other_fields, other_name),
        },
        KvEvent::BlockRemoved(e) => match name {
            "block_hashes" => hashes_json(&e.block_hashes),
            "medium" => opt(&e.medium),
            "group_idx" => opt(&e.group_idx),
            "locality" => opt(&e.locality),
            "ownership" => opt(&e.ownership),
            other_name => other(&e.other_fields, other_name),
        },
        KvEvent::AllBlocksCleared => Value::Null,
        KvEvent::Unknown(u) => panic!("unexpected unknown event {:?}", u.tag),
    }
}

/// Checks one typed event against its generic form: a map (vLLM >= 0.24,
/// absent fields must decode as None) or a positional array (vLLM <= 0.23).
/// Returns the number of fields compared.
pub fn assert_event_matches(
    expected: &Value,
    actual: &KvEvent,
    order: &FieldOrder,
    ctx: &str,
) -> usize {
    let mut compared = 0;
    match expected {
        Value::Object(map) => {
            let tag = map["type"].as_str().expect("type is a string");
            assert_eq!(actual.tag(), tag, "{ctx}: tag");
            for (name, value) in map.iter().filter(|(k, _)| *k != "type") {
                assert_eq!(&field_json(actual, name), value, "{ctx}: field {name}");
                compared += 1;
            }
            for name in order
                .for_tag(tag)
                .iter()
                .filter(|n| !map.contains_key(n.as_str()))
            {
                assert_eq!(
                    field_json(actual, name),
                    Value::Null,
                    "{ctx}: omitted {name}"
                );
                compared += 1;
            }
        }
        Value::Array(items) => {
            let tag = items[0].as_str().expect("array event starts with its tag");
            assert_eq!(actual.tag(), tag, "{ctx}: tag");
            let names = order.for_tag(tag);
            assert_eq!(
                items.len() - 1,
                names.len(),
                "{ctx}: positional field count"
            );
            for (name, value) in names.iter().zip(&items[1..]) {
                assert_eq!(&field_json(actual, name), value, "{ctx}: field {name}");
                compared += 1;
            }
        }
        other => panic!("{ctx}: event is neither map nor array: {other}"),
    }
    compared
}

/// Checks a typed batch against its generic `[ts, events, rank]` form.
/// Returns the number of event fields compared.
pub fn assert_batch_matches(
    expected: &Value,
    actual: &KvEventBatch,
    order: &FieldOrder,
    ctx: &str,
) -> usize {
    let items = array(expected, "batch");
    assert_eq!(items.len(), 3, "{ctx}: batch length");
    assert_eq!(Some(actual.ts), items[0].as_f64(), "{ctx}: ts");
    let events = array(&items[1], "events");
    assert_eq!(actual.events.len(), events.len(), "{ctx}: event count");
    let rank = items[2].as_i64();
    assert_eq!(actual.data_parallel_rank, rank, "{ctx}: data_parallel_rank");
    events
        .iter()
        .zip(&actual.events)
        .enumerate()
        .map(|(i, (e, a))| assert_event_matches(e, a, order, &format!("{ctx} event {i}")))
        .sum()
}
