//! The key schema of docs/state.md as data: which key names exist under a
//! namespace, and their types. Pure functions, shared by the summary, the
//! checker and its re-checks.

use crate::{KeySpace, check_name};

/// A Valkey type as `TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyType {
    /// `string`
    Str,
    /// `hash`
    Hash,
    /// `set`
    Set,
    /// `zset`
    ZSet,
}

impl KeyType {
    /// The name `TYPE` replies with.
    pub(crate) fn name(self) -> &'static str {
        match self {
            KeyType::Str => "string",
            KeyType::Hash => "hash",
            KeyType::Set => "set",
            KeyType::ZSet => "zset",
        }
    }
}

/// A key of one model, by its suffix after `<ns>:{<model>}:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModelKey {
    /// `ids`
    Ids,
    /// `seq`
    Seq,
    /// `leases`
    Leases,
    /// `view`
    View,
    /// `purge`
    Purge,
    /// `routers`
    Routers,
    /// `gc`
    Gc,
    /// `w:<idx>`
    Record(u64),
    /// `f:<bucket>`, the bucket as its 4 hex digits read as a number.
    Bucket(u16),
    /// `r:<idx>`
    Reverse(u64),
    /// `sp:<idx>`
    Spec(u64),
    /// `s:<idx>`
    Target(u64),
    /// `stage:<idx>:<sync_id>`
    Stage(u64, String),
    /// `dg:<idx>`
    Digests(u64),
    /// `stage_dg:<idx>:<sync_id>`
    StageDigests(u64, String),
    /// `st:<idx>`: the sync target's tiers (blocks off the GPU).
    TargetTiers(u64),
    /// `stage_t:<idx>:<sync_id>`: a staged snapshot's tiers.
    StageTiers(u64, String),
    /// `rc:<key>`: a cached response (64 hex digits), with a TTL.
    ResponseEntry(String),
    /// `rc_expiry`, `rc_sizes`, `rc_used`: the response cache's budget,
    /// with a TTL.
    ResponseIndex(ResponseIndex),
}

/// The response cache's accounting keys of a model's part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResponseIndex {
    /// `rc_expiry`: key → expiry (unix ms).
    Expiry,
    /// `rc_sizes`: key → bytes.
    Sizes,
    /// `rc_used`: the bytes counted.
    Used,
}

impl ResponseIndex {
    fn suffix(self) -> &'static str {
        match self {
            ResponseIndex::Expiry => "rc_expiry",
            ResponseIndex::Sizes => "rc_sizes",
            ResponseIndex::Used => "rc_used",
        }
    }
}

impl ModelKey {
    /// True for the response cache's keys, which expire by themselves and
    /// are no part of the routing state.
    pub(crate) fn is_response_cache(&self) -> bool {
        matches!(
            self,
            ModelKey::ResponseEntry(_) | ModelKey::ResponseIndex(_)
        )
    }

    /// The type the scripts give this key.
    pub(crate) fn expected_type(&self) -> KeyType {
        match self {
            ModelKey::Seq
            | ModelKey::ResponseEntry(_)
            | ModelKey::ResponseIndex(ResponseIndex::Used) => KeyType::Str,
            ModelKey::ResponseIndex(ResponseIndex::Expiry) => KeyType::ZSet,
            ModelKey::ResponseIndex(ResponseIndex::Sizes) => KeyType::Hash,
            ModelKey::Leases | ModelKey::Routers => KeyType::ZSet,
            ModelKey::Ids | ModelKey::View | ModelKey::Gc | ModelKey::Record(_) => KeyType::Hash,
            ModelKey::Bucket(_)
            | ModelKey::Digests(_)
            | ModelKey::StageDigests(..)
            | ModelKey::TargetTiers(_)
            | ModelKey::StageTiers(..) => KeyType::Hash,
            ModelKey::Purge
            | ModelKey::Reverse(_)
            | ModelKey::Spec(_)
            | ModelKey::Target(_)
            | ModelKey::Stage(..) => KeyType::Set,
        }
    }
}

/// What a key under `<ns>:` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyClass {
    /// `<ns>:models`
    Models,
    /// `<ns>:worker_model`
    WorkerModel,
    /// A key of `model`.
    Model {
        /// The model (the hash tag).
        model: String,
        /// Which key.
        key: ModelKey,
    },
    /// A key of a tenant's limits (`<ns>:tenant:{<tenant>}:…`).
    Tenant(TenantKey),
    /// Not in the schema; why.
    Unknown(String),
}

/// Which key of a tenant's limits (`limit_*.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TenantKey {
    /// `rq`, `tk`: a GCRA arrival time.
    ArrivalTime,
    /// `cc`: router → requests in flight.
    InFlight,
    /// `ccl`: router → lease expiry.
    InFlightLeases,
}

impl KeyClass {
    /// The type the schema gives this key, if it is in the schema.
    pub(crate) fn expected_type(&self) -> Option<KeyType> {
        match self {
            KeyClass::Models => Some(KeyType::Set),
            KeyClass::WorkerModel => Some(KeyType::Hash),
            KeyClass::Model { key, .. } => Some(key.expected_type()),
            KeyClass::Tenant(TenantKey::ArrivalTime) => Some(KeyType::Str),
            KeyClass::Tenant(TenantKey::InFlight) => Some(KeyType::Hash),
            KeyClass::Tenant(TenantKey::InFlightLeases) => Some(KeyType::ZSet),
            KeyClass::Unknown(_) => None,
        }
    }
}

/// Classifies `key`, a key that starts with `<ns>:`.
pub(crate) fn classify(ns: &str, key: &[u8]) -> KeyClass {
    let unknown = |why: &str| KeyClass::Unknown(why.to_owned());
    let Ok(key) = std::str::from_utf8(key) else {
        return unknown("not UTF-8");
    };
    let Some(rest) = key.strip_prefix(ns).and_then(|r| r.strip_prefix(':')) else {
        return unknown("outside the namespace");
    };
    match rest {
        "models" => return KeyClass::Models,
        "worker_model" => return KeyClass::WorkerModel,
        _ => {}
    }
    if let Some(tenant) = rest.strip_prefix("tenant:{") {
        let key = tenant
            .split_once('}')
            .filter(|(t, _)| check_name("tenant", t).is_ok())
            .and_then(|(_, suffix)| match suffix {
                ":rq" | ":tk" => Some(TenantKey::ArrivalTime),
                ":cc" => Some(TenantKey::InFlight),
                ":ccl" => Some(TenantKey::InFlightLeases),
                _ => None,
            });
        return match key {
            Some(k) => KeyClass::Tenant(k),
            None => unknown("not a key of a tenant's limits"),
        };
    }
    let Some(tagged) = rest.strip_prefix('{') else {
        return unknown("no {model} hash tag and not a namespace key");
    };
    let Some((model, suffix)) = tagged.split_once('}') else {
        return unknown("unterminated hash tag");
    };
    if model.is_empty() || check_name("model", model).is_err() {
        return unknown("the hash tag is not a valid model name");
    }
    let Some(suffix) = suffix.strip_prefix(':') else {
        return unknown("no ':' after the model's hash tag");
    };
    match model_key(suffix) {
        Some(key) => KeyClass::Model {
            model: model.to_owned(),
            key,
        },
        None => unknown("not a key of the schema"),
    }
}

fn model_key(suffix: &str) -> Option<ModelKey> {
    Some(match suffix {
        "ids" => ModelKey::Ids,
        "seq" => ModelKey::Seq,
        "leases" => ModelKey::Leases,
        "view" => ModelKey::View,
        "purge" => ModelKey::Purge,
        "routers" => ModelKey::Routers,
        "gc" => ModelKey::Gc,
        "rc_expiry" => ModelKey::ResponseIndex(ResponseIndex::Expiry),
        "rc_sizes" => ModelKey::ResponseIndex(ResponseIndex::Sizes),
        "rc_used" => ModelKey::ResponseIndex(ResponseIndex::Used),
        _ => {
            let (kind, arg) = suffix.split_once(':')?;
            match kind {
                "w" => ModelKey::Record(parse_idx(arg)?),
                "f" => ModelKey::Bucket(parse_bucket(arg)?),
                "r" => ModelKey::Reverse(parse_idx(arg)?),
                "sp" => ModelKey::Spec(parse_idx(arg)?),
                "s" => ModelKey::Target(parse_idx(arg)?),
                "st" => ModelKey::TargetTiers(parse_idx(arg)?),
                "dg" => ModelKey::Digests(parse_idx(arg)?),
                "rc" if arg.len() == 64 && arg.bytes().all(is_lower_hex) => {
                    ModelKey::ResponseEntry(arg.to_owned())
                }
                "stage" | "stage_dg" | "stage_t" => {
                    let (idx, sync_id) = arg.split_once(':')?;
                    let ok = !sync_id.is_empty()
                        && sync_id.len() <= 64
                        && sync_id
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    if !ok {
                        return None;
                    }
                    let (idx, sync_id) = (parse_idx(idx)?, sync_id.to_owned());
                    match kind {
                        "stage" => ModelKey::Stage(idx, sync_id),
                        "stage_dg" => ModelKey::StageDigests(idx, sync_id),
                        _ => ModelKey::StageTiers(idx, sync_id),
                    }
                }
                _ => return None,
            }
        }
    })
}

/// An incarnation number as the scripts write it (`INCR`): 1 or more,
/// decimal, no sign, no leading zero.
pub(crate) fn parse_idx(s: &str) -> Option<u64> {
    if s.is_empty() || s.starts_with('0') || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A bucket suffix: 4 lower-case hex digits, the last one 0 or 8.
fn parse_bucket(s: &str) -> Option<u16> {
    if s.len() != 4 || !s.bytes().all(is_lower_hex) || !s.ends_with(['0', '8']) {
        return None;
    }
    u16::from_str_radix(s, 16).ok()
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// A block hash as the scripts store it: 16 lower-case hex digits.
pub(crate) fn valid_hash(h: &[u8]) -> bool {
    h.len() == 16 && h.iter().all(|&b| is_lower_hex(b))
}

/// The bucket of a valid hash: its first four digits, the fourth rounded
/// down to 0 or 8 (`bucket_key` of lib.lua).
pub(crate) fn bucket_of(h: &[u8]) -> u16 {
    let digit = |b: u8| match b {
        b'0'..=b'9' => u16::from(b - b'0'),
        _ => u16::from(b.wrapping_sub(b'a')) + 10,
    };
    let v = h
        .iter()
        .take(4)
        .fold(0u16, |acc, &b| (acc << 4) | (digit(b) & 0xf));
    v & !0x7
}

/// Builds the key names of one model (docs/state.md, "Key schema").
#[derive(Debug, Clone)]
pub(crate) struct ModelKeys {
    base: String,
    ids: String,
}

impl ModelKeys {
    /// The keys of `model` in `keys`' namespace.
    pub(crate) fn new(keys: &KeySpace, model: &str) -> Self {
        ModelKeys {
            base: keys.model_base(model),
            ids: keys.worker_ids(model),
        }
    }

    /// `<ns>:{<model>}`
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The name of `key`.
    pub(crate) fn name(&self, key: &ModelKey) -> String {
        let b = &self.base;
        match key {
            ModelKey::Ids => self.ids.clone(),
            ModelKey::Seq => format!("{b}:seq"),
            ModelKey::Leases => format!("{b}:leases"),
            ModelKey::View => format!("{b}:view"),
            ModelKey::Purge => format!("{b}:purge"),
            ModelKey::Routers => format!("{b}:routers"),
            ModelKey::Gc => format!("{b}:gc"),
            ModelKey::Record(i) => format!("{b}:w:{i}"),
            ModelKey::Bucket(v) => format!("{b}:f:{v:04x}"),
            ModelKey::Reverse(i) => format!("{b}:r:{i}"),
            ModelKey::Spec(i) => format!("{b}:sp:{i}"),
            ModelKey::Target(i) => format!("{b}:s:{i}"),
            ModelKey::Stage(i, id) => format!("{b}:stage:{i}:{id}"),
            ModelKey::Digests(i) => format!("{b}:dg:{i}"),
            ModelKey::StageDigests(i, id) => format!("{b}:stage_dg:{i}:{id}"),
            ModelKey::TargetTiers(i) => format!("{b}:st:{i}"),
            ModelKey::StageTiers(i, id) => format!("{b}:stage_t:{i}:{id}"),
            ModelKey::ResponseEntry(k) => format!("{b}:rc:{k}"),
            ModelKey::ResponseIndex(i) => format!("{b}:{}", i.suffix()),
        }
    }
}

/// Escapes `s` for a SCAN `MATCH` pattern (model names may hold `*?[]\`).
pub(crate) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
