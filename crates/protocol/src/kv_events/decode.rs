//! Decoding one KV-event payload (`msgspec.msgpack.Encoder().encode(batch)`)
//! into a [`KvEventBatch`], for every vLLM wire format:
//!
//! * the batch is an array `[ts, events, data_parallel_rank]`; engines older
//!   than the rank field send `[ts, events]`, and trailing elements a newer
//!   engine might add are skipped and counted
//!   ([`KvEventBatch::extra_fields`]); a batch encoded as a map (`{"ts",
//!   "events", "data_parallel_rank"}`, as msgspec writes a struct without
//!   `array_like`) decodes the same, its unknown keys skipped and counted;
//! * vLLM >= 0.24 sends each event as a map whose `type` key names it
//!   (normally first, but any position is accepted); fields holding their
//!   default are absent, unknown keys are kept in `other_fields`;
//! * vLLM <= 0.23 sends each event as a positional array `[tag, field1, ...]`
//!   whose length grew release by release: missing trailing optional fields
//!   decode as `None`, extra trailing fields are skipped.
//!
//! Policy for bad input (the payload comes from the network, so nothing here
//! may panic): an event whose tag is unknown becomes [`KvEvent::Unknown`] and
//! the rest of the batch still decodes, because a newer engine adding an event
//! kind is expected. Anything else that is malformed — a wrong type, a missing
//! required field, a truncated payload, a size over [`DecodeLimits`] — fails
//! the whole batch with a [`DecodeError`]: silently dropping one `BlockStored`
//! or `BlockRemoved` would leave the router's index wrong without anyone
//! knowing, while a failed batch is visible (the caller can treat its sequence
//! number as a gap and replay or resync).

use thiserror::Error;

use super::decode_fields::{EventKind, Layout, decode_fields};
use super::event::{KvEvent, KvEventBatch, UnknownEvent};
use super::msgpack_read::{OpaqueBudget, Reader, WireError};

/// Size bounds applied while decoding, so a hostile or broken engine cannot
/// make the decoder allocate without limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest accepted payload, in bytes.
    pub max_payload_bytes: usize,
    /// Most events in one batch.
    pub max_events: usize,
    /// Most block hashes in one event.
    pub max_hashes_per_event: usize,
    /// Most token ids in one event.
    pub max_tokens_per_event: usize,
    /// Most items (scalars and containers) in all opaque values of one
    /// payload: extra keys, unknown fields, unknown events.
    pub max_opaque_items: usize,
    /// Deepest nesting of one opaque value.
    pub max_opaque_depth: usize,
}

impl Default for DecodeLimits {
    /// Generous for real engines (a step of 1M blocks would be extraordinary)
    /// yet bounded: 64 MiB payloads, 1M hashes and 16M tokens per event.
    fn default() -> Self {
        Self {
            max_payload_bytes: 64 << 20,
            max_events: 1 << 20,
            max_hashes_per_event: 1 << 20,
            max_tokens_per_event: 16 << 20,
            max_opaque_items: 1 << 20,
            max_opaque_depth: 32,
        }
    }
}

/// Why a payload could not be decoded into a [`KvEventBatch`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The payload is larger than [`DecodeLimits::max_payload_bytes`].
    #[error("payload is {len} bytes; the limit is {max}")]
    PayloadTooLarge {
        /// The payload's size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Malformed MessagePack, a wrong type, or an over-limit length at the
    /// named place.
    #[error("{context}: {source}")]
    Wire {
        /// Where in the batch, e.g. `event 2 (BlockStored) field "token_ids"`.
        context: String,
        /// What was wrong there.
        #[source]
        source: WireError,
    },
    /// A map batch without one of its required keys (`ts`, `events`).
    #[error("batch map has no {field:?} key")]
    MissingBatchField {
        /// The missing key.
        field: &'static str,
    },
    /// A map batch that names the same key twice.
    #[error("batch map names {field:?} more than once")]
    DuplicateBatchField {
        /// The repeated key.
        field: &'static str,
    },
    /// The batch array has fewer than its two required elements.
    #[error("batch is an array of {len} element(s); expected [ts, events, data_parallel_rank]")]
    BatchTooShort {
        /// The array's length.
        len: usize,
    },
    /// An event that is neither a tagged map nor a tagged array.
    #[error("event {index}: {detail}")]
    MalformedEvent {
        /// The event's position in the batch.
        index: usize,
        /// What is wrong with it.
        detail: String,
    },
    /// A known event without one of its required fields.
    #[error("event {index} ({tag}): required field {field:?} is missing")]
    MissingField {
        /// The event's position in the batch.
        index: usize,
        /// The event's tag.
        tag: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// A map event that names the same field twice.
    #[error("event {index} ({tag}): field {field:?} appears more than once")]
    DuplicateField {
        /// The event's position in the batch.
        index: usize,
        /// The event's tag.
        tag: &'static str,
        /// The repeated field.
        field: String,
    },
    /// Bytes left over after the batch, which msgspec would also reject.
    #[error("{remaining} trailing byte(s) after the batch, at byte {offset}")]
    TrailingBytes {
        /// Where the extra bytes start.
        offset: usize,
        /// How many there are.
        remaining: usize,
    },
}

impl DecodeError {
    /// A short, fixed name of the kind of failure (a metric label, a key
    /// for logging each kind once).
    pub fn kind(&self) -> &'static str {
        match self {
            DecodeError::PayloadTooLarge { .. } => "payload_too_large",
            DecodeError::Wire { .. } => "wire",
            DecodeError::MissingBatchField { .. } => "missing_batch_field",
            DecodeError::DuplicateBatchField { .. } => "duplicate_batch_field",
            DecodeError::BatchTooShort { .. } => "batch_too_short",
            DecodeError::MalformedEvent { .. } => "malformed_event",
            DecodeError::MissingField { .. } => "missing_field",
            DecodeError::DuplicateField { .. } => "duplicate_field",
            DecodeError::TrailingBytes { .. } => "trailing_bytes",
        }
    }
}

/// Builds the `map_err` closure that names where a low-level error happened.
pub(crate) fn at(context: impl Fn() -> String) -> impl Fn(WireError) -> DecodeError {
    move |source| DecodeError::Wire {
        context: context(),
        source,
    }
}

/// Decodes one payload with the default [`DecodeLimits`].
pub fn decode_batch(payload: &[u8]) -> Result<KvEventBatch, DecodeError> {
    decode_batch_with_limits(payload, &DecodeLimits::default())
}

/// Decodes one payload (the third frame of a PUB message, or the last frame
/// of a replay reply) within `limits`.
pub fn decode_batch_with_limits(
    payload: &[u8],
    limits: &DecodeLimits,
) -> Result<KvEventBatch, DecodeError> {
    if payload.len() > limits.max_payload_bytes {
        return Err(DecodeError::PayloadTooLarge {
            len: payload.len(),
            max: limits.max_payload_bytes,
        });
    }
    let mut r = Reader::new(payload);
    let mut budget = OpaqueBudget {
        items_left: limits.max_opaque_items,
        max_items: limits.max_opaque_items,
        max_depth: limits.max_opaque_depth,
    };
    let batch = match r.peek().map_err(at(|| "batch".into()))? {
        0x80..=0x8f | 0xde | 0xdf => decode_map_batch(&mut r, limits, &mut budget)?,
        _ => decode_array_batch(&mut r, limits, &mut budget)?,
    };
    if r.remaining() > 0 {
        return Err(DecodeError::TrailingBytes {
            offset: r.offset(),
            remaining: r.remaining(),
        });
    }
    Ok(batch)
}

/// `[ts, events, data_parallel_rank, ...]`.
fn decode_array_batch(
    r: &mut Reader<'_>,
    limits: &DecodeLimits,
    budget: &mut OpaqueBudget,
) -> Result<KvEventBatch, DecodeError> {
    let len = r
        .read_array_len(usize::MAX)
        .map_err(at(|| "batch".into()))?;
    if len < 2 {
        return Err(DecodeError::BatchTooShort { len });
    }
    let ts = read_timestamp(r)?;
    let events = read_events(r, limits, budget)?;
    let data_parallel_rank = if len >= 3 { read_rank(r)? } else { None };
    for extra in 3..len {
        r.skip_value()
            .map_err(at(|| format!("batch element {extra}")))?;
    }
    Ok(KvEventBatch {
        ts,
        events,
        data_parallel_rank,
        extra_fields: len.saturating_sub(3),
    })
}

/// `{"ts": .., "events": [..], "data_parallel_rank": ..}`, keys in any
/// order; a missing rank is `None`, unknown keys are skipped and counted.
fn decode_map_batch(
    r: &mut Reader<'_>,
    limits: &DecodeLimits,
    budget: &mut OpaqueBudget,
) -> Result<KvEventBatch, DecodeError> {
    let len = r.read_map_len(usize::MAX).map_err(at(|| "batch".into()))?;
    let (mut ts, mut events, mut rank, mut extra) = (None, None, None, 0);
    for _ in 0..len {
        let key = r.read_str().map_err(at(|| "batch key".into()))?;
        let duplicate = |field| Err(DecodeError::DuplicateBatchField { field });
        match key {
            "ts" if ts.is_some() => return duplicate("ts"),
            "events" if events.is_some() => return duplicate("events"),
            "data_parallel_rank" if rank.is_some() => return duplicate("data_parallel_rank"),
            "ts" => ts = Some(read_timestamp(r)?),
            "events" => events = Some(read_events(r, limits, budget)?),
            "data_parallel_rank" => rank = Some(read_rank(r)?),
            other => {
                r.skip_value()
                    .map_err(at(|| format!("batch key {other:?}")))?;
                extra += 1;
            }
        }
    }
    Ok(KvEventBatch {
        ts: ts.ok_or(DecodeError::MissingBatchField { field: "ts" })?,
        events: events.ok_or(DecodeError::MissingBatchField { field: "events" })?,
        data_parallel_rank: rank.flatten(),
        extra_fields: extra,
    })
}

fn read_events(
    r: &mut Reader<'_>,
    limits: &DecodeLimits,
    budget: &mut OpaqueBudget,
) -> Result<Vec<KvEvent>, DecodeError> {
    let count = r
        .read_array_len(limits.max_events)
        .map_err(at(|| "batch events".into()))?;
    let mut events = Vec::with_capacity(count.min(1024));
    for index in 0..count {
        events.push(decode_event(r, index, limits, budget)?);
    }
    Ok(events)
}

/// `data_parallel_rank`: an int, or nil.
fn read_rank(r: &mut Reader<'_>) -> Result<Option<i64>, DecodeError> {
    let ctx = || "batch data_parallel_rank".to_owned();
    if r.try_nil().map_err(at(ctx))? {
        return Ok(None);
    }
    r.read_int_as::<i64>("i64").map(Some).map_err(at(ctx))
}

/// `ts` is a Python float; msgspec also accepts an int there, so do we.
fn read_timestamp(r: &mut Reader<'_>) -> Result<f64, DecodeError> {
    let ctx = at(|| "batch ts".into());
    match r.peek().map_err(&ctx)? {
        0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xcf | 0xd0..=0xd3 => {
            r.read_int().map(|v| v as f64).map_err(ctx)
        }
        _ => r.read_f64().map_err(ctx),
    }
}

fn decode_event(
    r: &mut Reader<'_>,
    index: usize,
    limits: &DecodeLimits,
    budget: &mut OpaqueBudget,
) -> Result<KvEvent, DecodeError> {
    let start = r.clone();
    let (layout, tag) = read_tag(r, index)?;
    let kind = match tag.as_str() {
        "BlockStored" => EventKind::BlockStored,
        "BlockRemoved" => EventKind::BlockRemoved,
        "AllBlocksCleared" => EventKind::AllBlocksCleared,
        _ => {
            // Keep the whole event, tag included, as it was on the wire.
            *r = start;
            let raw = r
                .read_value(budget)
                .map_err(at(|| format!("event {index} ({tag})")))?;
            return Ok(KvEvent::Unknown(UnknownEvent { tag, raw }));
        }
    };
    decode_fields(r, layout, kind, index, limits, budget)
}

/// Reads the event header and its tag. For a map, the reader is left just
/// after the header (the `type` entry is read again, and skipped, by the
/// field decoder); for an array it is left after the tag element.
fn read_tag(r: &mut Reader<'_>, index: usize) -> Result<(Layout, String), DecodeError> {
    let ctx = || format!("event {index}");
    match r.peek().map_err(at(ctx))? {
        0x80..=0x8f | 0xde | 0xdf => {
            let len = r.read_map_len(usize::MAX).map_err(at(ctx))?;
            let mut probe = r.clone();
            for _ in 0..len {
                let key = probe
                    .read_str()
                    .map_err(at(|| format!("event {index} key")))?;
                if key == "type" {
                    let tag = probe
                        .read_str()
                        .map_err(at(|| format!("event {index} type")))?;
                    return Ok((Layout::Map(len), tag.to_owned()));
                }
                probe
                    .skip_value()
                    .map_err(at(|| format!("event {index} field {key:?}")))?;
            }
            Err(DecodeError::MalformedEvent {
                index,
                detail: "map event has no \"type\" key".into(),
            })
        }
        0x90..=0x9f | 0xdc | 0xdd => {
            let len = r.read_array_len(usize::MAX).map_err(at(ctx))?;
            if len == 0 {
                return Err(DecodeError::MalformedEvent {
                    index,
                    detail: "array event is empty (no tag)".into(),
                });
            }
            let tag = r.read_str().map_err(at(|| format!("event {index} tag")))?;
            Ok((Layout::Array(len), tag.to_owned()))
        }
        _ => {
            // Produces the precise "expected map, found X" error.
            r.read_map_len(usize::MAX).map_err(at(ctx))?;
            Err(DecodeError::MalformedEvent {
                index,
                detail: "not a map or array".into(),
            })
        }
    }
}
