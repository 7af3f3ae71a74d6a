//! Bad input: every malformed payload or frame set is an error, never a
//! panic; unknown event kinds and fields are kept, not fatal.

use bytes::Bytes;
use protocol::kv_events::{
    DecodeError, DecodeLimits, EngineHash, KvEvent, PubMessage, ReplayReply, ReplayRequest,
    WireError, decode_batch, decode_batch_with_limits, encode_batch,
};
use rmpv::Value as V;

use super::generic::{KV_EVENTS, array, frames, load};

mod errors;
mod tolerance;

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
