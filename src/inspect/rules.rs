//! The invariants as pure functions of small sets of facts. The scan and
//! the atomic re-check both gather the same facts about a subject (an entry,
//! an incarnation, a key...) and call the same function, so a violation is
//! confirmed by exactly the rule that found it.

use std::collections::BTreeMap;

use super::codes::{Code, Issue};
use super::schema::{
    Entry, KeyClass, Kind, ModelKey, ViewField, bucket_of, parse_idx, parse_value, valid_hash,
    view_field, view_record,
};

/// Whether an incarnation is known: leased (live or expired, not collected
/// yet) or queued for purge (draining).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Known {
    /// Its lease expiry (unix ms) when it is in `leases`.
    pub(crate) lease: Option<i64>,
    /// True when it is in `purge`.
    pub(crate) purging: bool,
}

impl Known {
    fn known(self) -> bool {
        self.lease.is_some() || self.purging
    }
}

/// What is known about incarnation `idx`'s entry for block `hash`.
#[derive(Debug, Clone)]
pub(crate) struct EntryFacts {
    /// The block hash (valid).
    pub(crate) hash: String,
    /// The incarnation.
    pub(crate) idx: u64,
    /// Its entry in the forward value, if any.
    pub(crate) entry: Option<Entry>,
    /// hash ∈ `r:<idx>`
    pub(crate) in_r: bool,
    /// hash ∈ `sp:<idx>`
    pub(crate) in_sp: bool,
    /// The incarnation's standing.
    pub(crate) known: Known,
    /// Server time, unix ms.
    pub(crate) now_ms: i64,
    /// The TTL horizon in ms.
    pub(crate) horizon_ms: i64,
}

/// Invariants 1 to 3 for one (hash, incarnation) pair.
pub(crate) fn entry_issues(f: &EntryFacts) -> Vec<Issue> {
    let mut out = Vec::new();
    let (h, i) = (&f.hash, f.idx);
    let kind = f.entry.map(|e| e.kind);
    match f.entry {
        Some(e) if !f.in_r => out.push(Issue::new(
            Code::ForwardWithoutReverse,
            format!("forward entry {e} of {h}, but {h} is not in r:{i}"),
        )),
        None if f.in_r => out.push(Issue::new(
            Code::ReverseWithoutForward,
            format!("{h} is in r:{i}, but its forward value has no entry of {i}"),
        )),
        _ => {}
    }
    if kind == Some(Kind::Speculative) && !f.in_sp {
        out.push(Issue::new(
            Code::SpeculativeNotInSp,
            format!("speculative entry of {i} for {h}, but {h} is not in sp:{i}"),
        ));
    }
    if f.in_sp && kind != Some(Kind::Speculative) {
        let what = if kind.is_some() {
            "is confirmed"
        } else {
            "does not exist"
        };
        out.push(Issue::new(
            Code::SpMemberNotSpeculative,
            format!("{h} is in sp:{i}, but its entry of {i} {what}"),
        ));
    }
    if f.in_sp && !f.in_r {
        out.push(Issue::new(
            Code::SpNotInReverse,
            format!("{h} is in sp:{i} but not in r:{i}"),
        ));
    }
    if let Some(e) = f.entry {
        if !f.known.known() {
            out.push(Issue::new(
                Code::EntryOfUnknownIncarnation,
                format!("entry {e} of {h}: incarnation {i} is neither leased nor being purged"),
            ));
        }
        let exp_ms = i64::try_from(e.expiry_s).unwrap_or(i64::MAX / 1000) * 1000;
        if e.kind == Kind::Speculative && exp_ms > f.now_ms.saturating_add(f.horizon_ms) {
            out.push(Issue::new(
                Code::SpeculativeExpiryTooFar,
                format!("speculative entry {e} of {h} expires in {} s", (exp_ms - f.now_ms) / 1000),
            ));
        }
    }
    out
}

/// A forward field and its value, as found in bucket `f:<bucket>`.
#[derive(Debug, Clone)]
pub(crate) struct FieldFacts {
    /// The bucket it was found in.
    pub(crate) bucket: u16,
    /// The field (should be a block hash of that bucket).
    pub(crate) field: Vec<u8>,
    /// Its value.
    pub(crate) value: Vec<u8>,
}

/// Invariants 3 and 5 for one forward field: a hash of its bucket, and a
/// well-formed value.
pub(crate) fn field_issues(f: &FieldFacts) -> Vec<Issue> {
    let mut out = Vec::new();
    let shown = String::from_utf8_lossy(&f.field);
    if !valid_hash(&f.field) {
        out.push(Issue::new(
            Code::MisplacedForwardField,
            format!("field {shown:?} of f:{:04x} is not a 16-hex block hash", f.bucket),
        ));
    } else if bucket_of(&f.field) != f.bucket {
        out.push(Issue::new(
            Code::MisplacedForwardField,
            format!(
                "{shown} is in f:{:04x}, but belongs in f:{:04x}",
                f.bucket,
                bucket_of(&f.field)
            ),
        ));
    }
    let parsed = parse_value(&f.value);
    if !parsed.problems.is_empty() {
        out.push(Issue::new(
            Code::MalformedEntry,
            format!(
                "{shown} = {:?}: {}",
                String::from_utf8_lossy(&f.value),
                parsed.problems.join("; ")
            ),
        ));
    }
    out
}

/// What is known about one incarnation outside the maps.
#[derive(Debug, Clone, Default)]
pub(crate) struct IncarnationFacts {
    /// The incarnation.
    pub(crate) idx: u64,
    /// Its standing.
    pub(crate) known: Known,
    /// Its record `w:<idx>`, if it exists.
    pub(crate) record: Option<BTreeMap<String, String>>,
    /// Its routing-view record, if any.
    pub(crate) view: Option<String>,
    /// `ids[record.id]`, read along with the record.
    pub(crate) ids_of_record_id: Option<String>,
    /// The `seq` counter.
    pub(crate) seq: Option<String>,
    /// `r:<idx>` exists.
    pub(crate) has_r: bool,
    /// `sp:<idx>` exists.
    pub(crate) has_sp: bool,
    /// `s:<idx>` exists.
    pub(crate) has_s: bool,
    /// Server time, unix ms.
    pub(crate) now_ms: i64,
    /// The TTL horizon in ms.
    pub(crate) horizon_ms: i64,
}

/// Invariants 2 to 4 for one incarnation.
pub(crate) fn incarnation_issues(f: &IncarnationFacts) -> Vec<Issue> {
    let mut out = Vec::new();
    let i = f.idx;
    let mut push = |code, detail: String| out.push(Issue::new(code, detail));
    if f.known.lease.is_some() && f.known.purging {
        push(Code::LeasedAndPurging, format!("{i} is in leases and in purge"));
    }
    if f.known.known() && f.record.is_none() {
        push(Code::MissingRecord, format!("{i} is leased or purging, but w:{i} is missing"));
    }
    if !f.known.known() {
        let keys: Vec<String> = [
            (f.record.is_some(), "w"),
            (f.has_r, "r"),
            (f.has_sp, "sp"),
            (f.has_s, "s"),
        ]
        .iter()
        .filter(|(has, _)| *has)
        .map(|(_, k)| format!("{k}:{i}"))
        .collect();
        if !keys.is_empty() {
            push(
                Code::KeysOfUnknownIncarnation,
                format!("{} exist, but {i} is neither leased nor being purged", keys.join(", ")),
            );
        }
        if f.view.is_some() {
            push(
                Code::ViewRecordOfPurged,
                format!("view has a record of {i}, which is neither leased nor being purged"),
            );
        }
    }
    if let Some(lease) = f.known.lease {
        if f.view.is_none() {
            push(Code::MissingViewRecord, format!("{i} is leased, but the view has no record of it"));
        }
        if lease > f.now_ms.saturating_add(f.horizon_ms) {
            push(
                Code::LeaseTooFar,
                format!("lease of {i} ends in {} s", (lease - f.now_ms) / 1000),
            );
        }
        if let Some(id) = f.record.as_ref().and_then(|r| r.get("id"))
            && f.ids_of_record_id.as_deref() != Some(i.to_string().as_str())
        {
            push(
                Code::LeaseNotInIds,
                format!(
                    "{i} is leased, but ids maps {id:?} to {}",
                    f.ids_of_record_id.as_deref().unwrap_or("nothing")
                ),
            );
        }
    }
    if let (Some(view), Some(rec)) = (&f.view, &f.record) {
        let want = view_record(rec);
        if *view != want {
            push(
                Code::StaleViewRecord,
                format!("view record of {i} is {view:?}, its record gives {want:?}"),
            );
        }
    }
    if f.known.known() || f.record.is_some() {
        match f.seq.as_deref().and_then(|s| s.parse::<u64>().ok()) {
            Some(seq) if i <= seq => {}
            Some(seq) => push(Code::IncarnationAboveSeq, format!("{i} is above seq {seq}")),
            None => push(Code::IncarnationAboveSeq, format!("{i} exists, but seq is missing or not a number")),
        }
    }
    if let Some(rec) = &f.record {
        record_issues(i, rec, f.has_s, &mut push);
    }
    out
}

fn record_issues(i: u64, rec: &BTreeMap<String, String>, has_s: bool, push: &mut impl FnMut(Code, String)) {
    if rec.get("id").is_none_or(|id| id.is_empty()) {
        push(Code::BadRecord, format!("w:{i} has no id"));
    }
    let syncing = rec.get("syncing").map(String::as_str);
    match syncing {
        Some("0") => {}
        Some("1") => {
            if !matches!(rec.get("patch_phase").map(String::as_str), Some("add" | "remove")) {
                push(Code::BadRecord, format!("w:{i} is syncing without a patch phase add|remove"));
            }
        }
        other => push(Code::BadRecord, format!("w:{i} has syncing = {other:?}, not 0 or 1")),
    }
    if has_s && syncing != Some("1") {
        push(Code::SyncTargetNotSyncing, format!("s:{i} exists, but w:{i} is not syncing"));
    }
}

/// One entry of `ids`: worker id → incarnation, and what that names.
#[derive(Debug, Clone)]
pub(crate) struct WorkerIdFacts {
    /// The worker id.
    pub(crate) id: String,
    /// The incarnation `ids` maps it to, as stored.
    pub(crate) idx: String,
    /// That incarnation's standing.
    pub(crate) known: Known,
    /// The `id` field of its record (`None`: no record or no field).
    pub(crate) record_id: Option<String>,
}

/// Invariant 2 for one `ids` entry.
pub(crate) fn worker_id_issues(f: &WorkerIdFacts) -> Vec<Issue> {
    let mut out = Vec::new();
    let (id, i) = (&f.id, &f.idx);
    if parse_idx(i).is_none() || !f.known.known() {
        out.push(Issue::new(
            Code::IdOfUnknownIncarnation,
            format!("ids maps {id:?} to {i:?}, which is neither leased nor being purged"),
        ));
    } else if f.record_id.as_deref() != Some(id.as_str()) {
        out.push(Issue::new(
            Code::IdRecordMismatch,
            format!("ids maps {id:?} to {i}, whose record names {:?}", f.record_id),
        ));
    }
    out
}

/// A field of the routing view other than an incarnation's record.
#[derive(Debug, Clone)]
pub(crate) struct ViewFieldFacts {
    /// The field name.
    pub(crate) field: String,
    /// Its value.
    pub(crate) value: String,
    /// The standing of the incarnation it names, if it names one.
    pub(crate) known: Known,
}

/// Invariant 4 for one in-flight (or malformed) view field.
pub(crate) fn view_field_issues(f: &ViewFieldFacts) -> Vec<Issue> {
    let mut out = Vec::new();
    match view_field(&f.field) {
        ViewField::Record(_) => {}
        ViewField::Bad => out.push(Issue::new(
            Code::BadViewField,
            format!("view field {:?} is neither <idx> nor <idx>:<router>", f.field),
        )),
        ViewField::InFlight(i, router) => {
            if !f.known.known() {
                out.push(Issue::new(
                    Code::InflightOfUnknownIncarnation,
                    format!("router {router:?} counts requests in flight to {i}, which is neither leased nor being purged"),
                ));
            }
            if f.value.parse::<i64>().map_or(true, |n| n < 1) {
                out.push(Issue::new(
                    Code::BadViewField,
                    format!("in-flight count {} = {:?} is not a positive integer", f.field, f.value),
                ));
            }
        }
    }
    out
}

/// Invariant 3 for one router lease (unix ms).
pub(crate) fn router_issues(router: &str, lease: i64, now_ms: i64, horizon_ms: i64) -> Vec<Issue> {
    if lease > now_ms.saturating_add(horizon_ms) {
        return vec![Issue::new(
            Code::RouterLeaseTooFar,
            format!("lease of router {router:?} ends in {} s", (lease - now_ms) / 1000),
        )];
    }
    Vec::new()
}

/// A key as found: its class, `TYPE` and `PTTL`.
#[derive(Debug, Clone)]
pub(crate) struct KeyFacts {
    /// What its name says it is.
    pub(crate) class: KeyClass,
    /// `TYPE` (`none` once gone).
    pub(crate) type_name: String,
    /// `PTTL` (-1: none, -2: gone).
    pub(crate) pttl: i64,
}

/// Invariants 3 and 5 for one key.
pub(crate) fn key_issues(f: &KeyFacts) -> Vec<Issue> {
    let mut out = Vec::new();
    if f.type_name == "none" {
        return out;
    }
    let Some(want) = f.class.expected_type() else {
        if let KeyClass::Unknown(why) = &f.class {
            out.push(Issue::new(Code::UnknownKey, format!("{} ({why})", f.type_name)));
        }
        return out;
    };
    if f.type_name != want.name() {
        out.push(Issue::new(
            Code::WrongType,
            format!("is a {}, the schema says {}", f.type_name, want.name()),
        ));
    }
    let stage = matches!(
        f.class,
        KeyClass::Model {
            key: ModelKey::Stage(..),
            ..
        }
    );
    if stage && f.pttl == -1 {
        out.push(Issue::new(Code::StageWithoutTtl, "a staged sync without a TTL"));
    }
    if !stage && f.pttl >= 0 {
        out.push(Issue::new(
            Code::UnexpectedTtl,
            format!("expires in {} ms; the scripts keep it until they delete it", f.pttl),
        ));
    }
    out
}

/// Invariant 5 for a member of `r:`/`sp:` (a block hash) or of
/// `leases`/`purge` (an incarnation), when it is present.
pub(crate) fn member_issues(key: &str, member: &[u8], hash: bool, present: bool) -> Vec<Issue> {
    let ok = if hash {
        valid_hash(member)
    } else {
        std::str::from_utf8(member).ok().and_then(parse_idx).is_some()
    };
    if !present || ok {
        return Vec::new();
    }
    let want = if hash { "a 16-hex block hash" } else { "an incarnation" };
    vec![Issue::new(
        Code::BadMember,
        format!("{:?} in {key} is not {want}", String::from_utf8_lossy(member)),
    )]
}

/// Invariant 5: a model with keys is listed in `<ns>:models`.
pub(crate) fn model_issues(model: &str, listed: bool) -> Vec<Issue> {
    if listed {
        return Vec::new();
    }
    vec![Issue::new(
        Code::ModelNotListed,
        format!("{model:?} has keys but is not in the models set"),
    )]
}
