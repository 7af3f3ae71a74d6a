//! Encoding a [`KvEventBatch`] exactly as vLLM 0.33 puts it on the wire, so a
//! simulated engine is indistinguishable from a real one to the router.
//!
//! vLLM's payload is `msgspec.msgpack.Encoder().encode(KVEventBatch)`:
//!
//! * the batch is a 3-element array `[ts (float64), events, rank]` — always
//!   three elements (msgspec issue 720), with nil when the rank is unset;
//! * each event is a map whose first key is `"type"`, then the fields in
//!   declaration order; fields without a default (the first seven of
//!   `BlockStored`, the first two of `BlockRemoved`) are always written, even
//!   as nil, and defaulted fields only when they hold a value;
//! * the map header is sized for all possible fields (see
//!   [`super::msgpack_write`]), integers use their shortest form, and hashes
//!   are written as they were received (int or bin).
//!
//! Entries in `other_fields` follow the known fields; an
//! [`KvEvent::Unknown`] event is written back as its raw value.

use super::decode_fields::{BLOCK_REMOVED_FIELDS, BLOCK_STORED_FIELDS};
use super::event::{BlockRemoved, BlockStored, EngineHash, KvEvent, KvEventBatch};
pub use super::msgpack_write::EncodeError;
use super::msgpack_write::Writer;

/// Encodes `batch` into vLLM 0.33's payload bytes.
pub fn encode_batch(batch: &KvEventBatch) -> Result<Vec<u8>, EncodeError> {
    let mut w = Writer::with_capacity(64 + 128 * batch.events.len());
    w.array_len(3)?;
    w.f64(batch.ts);
    w.array_len(batch.events.len())?;
    for event in &batch.events {
        encode_event(&mut w, event)?;
    }
    match batch.data_parallel_rank {
        Some(rank) => w.sint(rank),
        None => w.nil(),
    }
    Ok(w.into_bytes())
}

fn encode_event(w: &mut Writer, event: &KvEvent) -> Result<(), EncodeError> {
    match event {
        KvEvent::BlockStored(stored) => encode_stored(w, stored),
        KvEvent::BlockRemoved(removed) => encode_removed(w, removed),
        KvEvent::AllBlocksCleared => {
            w.map_header_for_struct(1, 1)?;
            w.str("type")?;
            w.str("AllBlocksCleared")
        }
        KvEvent::Unknown(unknown) => w.value(&unknown.raw),
    }
}

fn write_hash(w: &mut Writer, hash: &EngineHash) -> Result<(), EncodeError> {
    match hash {
        EngineHash::Int(v) => {
            w.uint(*v);
            Ok(())
        }
        EngineHash::Bytes(digest) => w.bin(digest),
    }
}

fn write_hashes(w: &mut Writer, name: &str, hashes: &[EngineHash]) -> Result<(), EncodeError> {
    w.str(name)?;
    w.array_len(hashes.len())?;
    hashes.iter().try_for_each(|hash| write_hash(w, hash))
}

/// A field without a default: always written, nil when unset.
fn str_or_nil(w: &mut Writer, name: &str, value: Option<&str>) -> Result<(), EncodeError> {
    w.str(name)?;
    match value {
        Some(s) => w.str(s),
        None => {
            w.nil();
            Ok(())
        }
    }
}

/// A field without a default: always written, nil when unset.
fn int_or_nil(w: &mut Writer, name: &str, value: Option<i64>) -> Result<(), EncodeError> {
    w.str(name)?;
    match value {
        Some(v) => w.sint(v),
        None => w.nil(),
    }
    Ok(())
}

/// A defaulted field: written only when set.
fn opt_str(w: &mut Writer, name: &str, value: Option<&str>) -> Result<(), EncodeError> {
    match value {
        Some(s) => str_or_nil(w, name, Some(s)),
        None => Ok(()),
    }
}

/// A defaulted field: written only when set.
fn opt_int(w: &mut Writer, name: &str, value: Option<i64>) -> Result<(), EncodeError> {
    match value {
        Some(v) => int_or_nil(w, name, Some(v)),
        None => Ok(()),
    }
}

/// Writes the map header and the `type` entry. `required` fields are always
/// present; `set_defaulted` counts the defaulted fields that will be written.
fn write_header(
    w: &mut Writer,
    tag: &str,
    fields: &[&str],
    required: usize,
    set_defaulted: usize,
    other: usize,
) -> Result<(), EncodeError> {
    let present = 1 + required + set_defaulted + other;
    w.map_header_for_struct(present, 1 + fields.len() + other)?;
    w.str("type")?;
    w.str(tag)
}

fn write_other(w: &mut Writer, other: &[(String, rmpv::Value)]) -> Result<(), EncodeError> {
    for (key, value) in other {
        w.str(key)?;
        w.value(value)?;
    }
    Ok(())
}

fn encode_stored(w: &mut Writer, e: &BlockStored) -> Result<(), EncodeError> {
    let set_defaulted = [
        e.extra_keys.is_some(),
        e.group_idx.is_some(),
        e.kv_cache_spec_kind.is_some(),
        e.kv_cache_spec_sliding_window.is_some(),
        e.locality.is_some(),
        e.ownership.is_some(),
        e.session_id.is_some(),
        e.lookahead_token_ids.is_some(),
    ];
    let set_defaulted = set_defaulted.iter().filter(|set| **set).count();
    let other = e.other_fields.len();
    write_header(
        w,
        "BlockStored",
        &BLOCK_STORED_FIELDS,
        7,
        set_defaulted,
        other,
    )?;
    write_hashes(w, "block_hashes", &e.block_hashes)?;
    w.str("parent_block_hash")?;
    match &e.parent_block_hash {
        Some(hash) => write_hash(w, hash)?,
        None => w.nil(),
    }
    w.str("token_ids")?;
    w.array_len(e.token_ids.len())?;
    e.token_ids
        .iter()
        .for_each(|token| w.uint(u64::from(*token)));
    w.str("block_size")?;
    w.uint(u64::from(e.block_size));
    int_or_nil(w, "lora_id", e.lora_id)?;
    str_or_nil(w, "medium", e.medium.as_deref())?;
    str_or_nil(w, "lora_name", e.lora_name.as_deref())?;
    if let Some(keys) = &e.extra_keys {
        w.str("extra_keys")?;
        w.array_len(keys.len())?;
        keys.iter().try_for_each(|key| w.value(key))?;
    }
    opt_int(w, "group_idx", e.group_idx)?;
    opt_str(w, "kv_cache_spec_kind", e.kv_cache_spec_kind.as_deref())?;
    opt_int(
        w,
        "kv_cache_spec_sliding_window",
        e.kv_cache_spec_sliding_window,
    )?;
    opt_str(w, "locality", e.locality.as_deref())?;
    opt_str(w, "ownership", e.ownership.as_deref())?;
    opt_str(w, "session_id", e.session_id.as_deref())?;
    if let Some(value) = &e.lookahead_token_ids {
        w.str("lookahead_token_ids")?;
        w.value(value)?;
    }
    write_other(w, &e.other_fields)
}

fn encode_removed(w: &mut Writer, e: &BlockRemoved) -> Result<(), EncodeError> {
    let set_defaulted = [
        e.group_idx.is_some(),
        e.locality.is_some(),
        e.ownership.is_some(),
    ];
    let set_defaulted = set_defaulted.iter().filter(|set| **set).count();
    let other = e.other_fields.len();
    write_header(
        w,
        "BlockRemoved",
        &BLOCK_REMOVED_FIELDS,
        2,
        set_defaulted,
        other,
    )?;
    write_hashes(w, "block_hashes", &e.block_hashes)?;
    str_or_nil(w, "medium", e.medium.as_deref())?;
    opt_int(w, "group_idx", e.group_idx)?;
    opt_str(w, "locality", e.locality.as_deref())?;
    opt_str(w, "ownership", e.ownership.as_deref())?;
    write_other(w, &e.other_fields)
}
