//! The per-field half of the decoder: vLLM's field tables for `BlockStored`
//! and `BlockRemoved`, and how each field's wire value becomes a typed field.
//!
//! One table serves both wire formats, because vLLM only ever appended
//! fields: a map key and a positional array index name the same field.

use super::decode::{DecodeError, DecodeLimits, at};
use super::event::{BlockRemoved, BlockStored, EngineHash, KvEvent};
use super::msgpack_read::{OpaqueBudget, Reader, WireError};

/// `BlockStored` fields in vLLM 0.33's declaration order (= array position
/// after the tag in vLLM <= 0.23).
pub(crate) const BLOCK_STORED_FIELDS: [&str; 15] = [
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
    "locality",
    "ownership",
    "session_id",
    "lookahead_token_ids",
];

/// `BlockRemoved` fields in vLLM 0.33's declaration order.
pub(crate) const BLOCK_REMOVED_FIELDS: [&str; 5] = [
    "block_hashes",
    "medium",
    "group_idx",
    "locality",
    "ownership",
];

/// Fields every release has sent (indices into the tables above); the others
/// decode as `None` when absent.
const BLOCK_STORED_REQUIRED: [usize; 3] = [0, 2, 3];
const BLOCK_REMOVED_REQUIRED: [usize; 1] = [0];

/// The known event kinds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum EventKind {
    BlockStored,
    BlockRemoved,
    AllBlocksCleared,
}

/// How the event's fields are laid out, with the element count from its
/// header (the tag included).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Layout {
    /// vLLM >= 0.24: a map; the reader is just after the header.
    Map(usize),
    /// vLLM <= 0.23: `[tag, fields...]`; the reader is just after the tag.
    Array(usize),
}

/// The event being filled in.
#[allow(
    clippy::large_enum_variant,
    reason = "one short-lived value per decoded event"
)]
enum Target {
    Stored(BlockStored),
    Removed(BlockRemoved),
    Cleared,
}

/// What a field reader needs besides the reader itself.
struct FieldCtx<'l> {
    index: usize,
    tag: &'static str,
    limits: &'l DecodeLimits,
}

impl FieldCtx<'_> {
    fn at(&self, field: &str) -> impl Fn(WireError) -> DecodeError {
        let (index, tag, field) = (self.index, self.tag, field.to_owned());
        at(move || format!("event {index} ({tag}) field {field:?}"))
    }
}

/// Decodes the fields of a known event whose header (and, for arrays, tag)
/// has been read.
pub(crate) fn decode_fields(
    r: &mut Reader<'_>,
    layout: Layout,
    kind: EventKind,
    index: usize,
    limits: &DecodeLimits,
    budget: &mut OpaqueBudget,
) -> Result<KvEvent, DecodeError> {
    let (tag, names, required, mut target): (_, &[&str], &[usize], _) = match kind {
        EventKind::BlockStored => (
            "BlockStored",
            &BLOCK_STORED_FIELDS,
            &BLOCK_STORED_REQUIRED,
            Target::Stored(BlockStored::default()),
        ),
        EventKind::BlockRemoved => (
            "BlockRemoved",
            &BLOCK_REMOVED_FIELDS,
            &BLOCK_REMOVED_REQUIRED,
            Target::Removed(BlockRemoved::default()),
        ),
        EventKind::AllBlocksCleared => ("AllBlocksCleared", &[], &[], Target::Cleared),
    };
    let ctx = FieldCtx { index, tag, limits };
    let mut seen = 0u32;
    match layout {
        Layout::Map(len) => {
            for _ in 0..len {
                let key = r.read_str().map_err(ctx.at("<key>"))?;
                match names.iter().position(|name| *name == key) {
                    Some(field) => {
                        if seen & (1 << field) != 0 {
                            return Err(DecodeError::DuplicateField {
                                index,
                                tag,
                                field: key.to_owned(),
                            });
                        }
                        seen |= 1 << field;
                        target.read_field(field, r, &ctx, budget)?;
                    }
                    None if key == "type" => r.skip_value().map_err(ctx.at(key))?,
                    None => target.read_other(key, r, &ctx, budget)?,
                }
            }
        }
        Layout::Array(len) => {
            for position in 1..len {
                let field = position - 1;
                if field < names.len() {
                    seen |= 1 << field;
                    target.read_field(field, r, &ctx, budget)?;
                } else {
                    r.skip_value().map_err(ctx.at(&format!("#{position}")))?;
                }
            }
        }
    }
    if let Some(&missing) = required.iter().find(|&&field| seen & (1 << field) == 0) {
        let field = names.get(missing).copied().unwrap_or("?");
        return Err(DecodeError::MissingField { index, tag, field });
    }
    Ok(match target {
        Target::Stored(event) => KvEvent::BlockStored(event),
        Target::Removed(event) => KvEvent::BlockRemoved(event),
        Target::Cleared => KvEvent::AllBlocksCleared,
    })
}

impl Target {
    /// Reads field number `field` of this event's table.
    fn read_field(
        &mut self,
        field: usize,
        r: &mut Reader<'_>,
        ctx: &FieldCtx<'_>,
        budget: &mut OpaqueBudget,
    ) -> Result<(), DecodeError> {
        let limits = ctx.limits;
        match self {
            Target::Stored(e) => {
                let name = BLOCK_STORED_FIELDS.get(field).copied().unwrap_or("?");
                let err = ctx.at(name);
                match field {
                    0 => e.block_hashes = hashes(r, limits.max_hashes_per_event).map_err(err)?,
                    1 => e.parent_block_hash = opt_hash(r).map_err(err)?,
                    2 => e.token_ids = tokens(r, limits.max_tokens_per_event).map_err(err)?,
                    3 => e.block_size = r.read_int_as("u32").map_err(err)?,
                    4 => e.lora_id = opt_i64(r).map_err(err)?,
                    5 => e.medium = opt_string(r).map_err(err)?,
                    6 => e.lora_name = opt_string(r).map_err(err)?,
                    7 => e.extra_keys = opt_list(r, budget).map_err(err)?,
                    8 => e.group_idx = opt_i64(r).map_err(err)?,
                    9 => e.kv_cache_spec_kind = opt_string(r).map_err(err)?,
                    10 => e.kv_cache_spec_sliding_window = opt_i64(r).map_err(err)?,
                    11 => e.locality = opt_string(r).map_err(err)?,
                    12 => e.ownership = opt_string(r).map_err(err)?,
                    13 => e.session_id = opt_string(r).map_err(err)?,
                    _ => e.lookahead_token_ids = opt_value(r, budget).map_err(err)?,
                }
            }
            Target::Removed(e) => {
                let name = BLOCK_REMOVED_FIELDS.get(field).copied().unwrap_or("?");
                let err = ctx.at(name);
                match field {
                    0 => e.block_hashes = hashes(r, limits.max_hashes_per_event).map_err(err)?,
                    1 => e.medium = opt_string(r).map_err(err)?,
                    2 => e.group_idx = opt_i64(r).map_err(err)?,
                    3 => e.locality = opt_string(r).map_err(err)?,
                    _ => e.ownership = opt_string(r).map_err(err)?,
                }
            }
            Target::Cleared => r.skip_value().map_err(ctx.at("?"))?,
        }
        Ok(())
    }

    /// Keeps a map entry with an unknown key (dropped for
    /// `AllBlocksCleared`, which has nowhere to keep it).
    fn read_other(
        &mut self,
        key: &str,
        r: &mut Reader<'_>,
        ctx: &FieldCtx<'_>,
        budget: &mut OpaqueBudget,
    ) -> Result<(), DecodeError> {
        let other = match self {
            Target::Stored(e) => &mut e.other_fields,
            Target::Removed(e) => &mut e.other_fields,
            Target::Cleared => return r.skip_value().map_err(ctx.at(key)),
        };
        let value = r.read_value(budget).map_err(ctx.at(key))?;
        other.push((key.to_owned(), value));
        Ok(())
    }
}

/// One hash: an int of any width (negative ones as two's complement) or a
/// binary digest.
fn hash(r: &mut Reader<'_>) -> Result<EngineHash, WireError> {
    match r.peek()? {
        0xc4..=0xc6 => Ok(EngineHash::Bytes(r.read_bin()?.to_vec())),
        0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xcf | 0xd0..=0xd3 => {
            let value = r.read_int()?;
            // `read_int` only yields values in i64::MIN..=u64::MAX.
            Ok(EngineHash::Int(match u64::try_from(value) {
                Ok(v) => v,
                Err(_) => value as i64 as u64,
            }))
        }
        _ => Err(r.unexpected("integer or binary hash")),
    }
}

fn hashes(r: &mut Reader<'_>, max: usize) -> Result<Vec<EngineHash>, WireError> {
    let len = r.read_array_len(max)?;
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        out.push(hash(r)?);
    }
    Ok(out)
}

fn opt_hash(r: &mut Reader<'_>) -> Result<Option<EngineHash>, WireError> {
    if r.try_nil()? {
        Ok(None)
    } else {
        hash(r).map(Some)
    }
}

fn tokens(r: &mut Reader<'_>, max: usize) -> Result<Vec<u32>, WireError> {
    let len = r.read_array_len(max)?;
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        out.push(r.read_int_as("token id (u32)")?);
    }
    Ok(out)
}

fn opt_i64(r: &mut Reader<'_>) -> Result<Option<i64>, WireError> {
    if r.try_nil()? {
        Ok(None)
    } else {
        r.read_int_as("i64").map(Some)
    }
}

fn opt_string(r: &mut Reader<'_>) -> Result<Option<String>, WireError> {
    if r.try_nil()? {
        Ok(None)
    } else {
        r.read_str().map(|s| Some(s.to_owned()))
    }
}

/// A nil or an array of opaque values (`extra_keys`: one entry per block).
fn opt_list(
    r: &mut Reader<'_>,
    budget: &mut OpaqueBudget,
) -> Result<Option<Vec<rmpv::Value>>, WireError> {
    if r.try_nil()? {
        return Ok(None);
    }
    let len = r.read_array_len(budget.items_left)?;
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        out.push(r.read_value(budget)?);
    }
    Ok(Some(out))
}

fn opt_value(
    r: &mut Reader<'_>,
    budget: &mut OpaqueBudget,
) -> Result<Option<rmpv::Value>, WireError> {
    if r.try_nil()? {
        Ok(None)
    } else {
        r.read_value(budget).map(Some)
    }
}
