//! The invariants of the maps and keys as pure functions of small sets of
//! facts. The scan and the atomic re-check both gather the same facts about
//! a subject (an entry, a field, a key...) and call the same function, so a
//! violation is confirmed by exactly the rule that found it. The rules about
//! incarnations, ids, the view and routers are in `fleet_rules.rs`.

use super::codes::{Code, Issue};
use super::format::{Entry, Kind, parse_value};
use super::schema::{KeyClass, ModelKey, bucket_of, parse_idx, valid_hash};

pub(crate) use super::fleet_rules::{
    IncarnationFacts, ViewFieldFacts, WorkerIdFacts, incarnation_issues, router_issues,
    view_field_issues, worker_id_issues,
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
    pub(crate) fn known(self) -> bool {
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
    // purge.lua pops r:<idx> (and the forward entries) batch by batch and
    // deletes sp:<idx> only at the end: a draining incarnation's sp may
    // hold hashes it no longer has.
    let sp_binds = !f.known.purging;
    if sp_binds && f.in_sp && kind != Some(Kind::Speculative) {
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
    if sp_binds && f.in_sp && !f.in_r {
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
                format!(
                    "speculative entry {e} of {h} expires in {} s",
                    (exp_ms - f.now_ms) / 1000
                ),
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
            format!(
                "field {shown:?} of f:{:04x} is not a 16-hex block hash",
                f.bucket
            ),
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
            out.push(Issue::new(
                Code::UnknownKey,
                format!("{} ({why})", f.type_name),
            ));
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
            key: ModelKey::Stage(..) | ModelKey::StageDigests(..) | ModelKey::StageTiers(..),
            ..
        }
    );
    let cached = matches!(&f.class, KeyClass::Model { key, .. } if key.is_response_cache());
    let tenant = matches!(f.class, KeyClass::Tenant(_));
    if tenant {
        if f.pttl == -1 {
            out.push(Issue::new(
                Code::TenantKeyWithoutTtl,
                "a tenant limit key without a TTL",
            ));
        }
        return out;
    }
    if stage && f.pttl == -1 {
        out.push(Issue::new(
            Code::StageWithoutTtl,
            "a staged sync without a TTL",
        ));
    }
    if cached && f.pttl == -1 {
        out.push(Issue::new(
            Code::ResponseCacheWithoutTtl,
            "a response cache key without a TTL",
        ));
    }
    if !stage && !cached && f.pttl >= 0 {
        out.push(Issue::new(
            Code::UnexpectedTtl,
            format!(
                "expires in {} ms; the scripts keep it until they delete it",
                f.pttl
            ),
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
        std::str::from_utf8(member)
            .ok()
            .and_then(parse_idx)
            .is_some()
    };
    if !present || ok {
        return Vec::new();
    }
    let want = if hash {
        "a 16-hex block hash"
    } else {
        "an incarnation"
    };
    vec![Issue::new(
        Code::BadMember,
        format!(
            "{:?} in {key} is not {want}",
            String::from_utf8_lossy(member)
        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(entry: Option<Entry>, in_r: bool, in_sp: bool, known: Known) -> EntryFacts {
        EntryFacts {
            hash: "3a7f0c2e91d455b0".into(),
            idx: 3,
            entry,
            in_r,
            in_sp,
            known,
            now_ms: 1_000_000,
            horizon_ms: 86_400_000,
        }
    }

    fn codes(f: &EntryFacts) -> Vec<Code> {
        entry_issues(f).into_iter().map(|i| i.code).collect()
    }

    #[test]
    fn entries_agree_with_their_sets() {
        let live = Known {
            lease: Some(2_000_000),
            purging: false,
        };
        let spec = Entry {
            idx: 3,
            kind: Kind::Speculative,
            expiry_s: 1_030,
        };
        let conf = Entry {
            kind: Kind::Confirmed(protocol::Tier::Gpu),
            ..spec
        };
        assert!(codes(&facts(Some(spec), true, true, live)).is_empty());
        assert!(codes(&facts(Some(conf), true, false, live)).is_empty());
        assert_eq!(
            codes(&facts(Some(conf), false, false, live)),
            [Code::ForwardWithoutReverse]
        );
        assert_eq!(
            codes(&facts(None, true, false, live)),
            [Code::ReverseWithoutForward]
        );
        assert_eq!(
            codes(&facts(Some(spec), true, false, live)),
            [Code::SpeculativeNotInSp]
        );
        assert_eq!(
            codes(&facts(Some(conf), true, true, live)),
            [Code::SpMemberNotSpeculative]
        );
        assert_eq!(
            codes(&facts(Some(conf), true, false, Known::default())),
            [Code::EntryOfUnknownIncarnation]
        );
        let far = Entry {
            expiry_s: 10_000_000,
            ..spec
        };
        assert_eq!(
            codes(&facts(Some(far), true, true, live)),
            [Code::SpeculativeExpiryTooFar]
        );
    }

    #[test]
    fn a_draining_incarnation_may_keep_stale_sp_members() {
        // purge.lua pops r:<idx> and the entries; sp:<idx> goes last.
        let draining = Known {
            lease: None,
            purging: true,
        };
        assert!(codes(&facts(None, false, true, draining)).is_empty());
        // Its forward and reverse maps still agree, though.
        assert_eq!(
            codes(&facts(None, true, false, draining)),
            [Code::ReverseWithoutForward]
        );
    }
}
