//! The invariants of the fleet's bookkeeping as pure functions of facts:
//! incarnations (leases, purge queue, records, the routing view, `seq`),
//! `ids`, in-flight counts and router leases. See `rules.rs` for the maps.

use std::collections::BTreeMap;

use super::codes::{Code, Issue};
use super::format::{ViewField, view_field};
use super::rules::Known;
use super::schema::parse_idx;
use crate::ViewRecord;

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
    pub(crate) view: Option<Vec<u8>>,
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
        push(
            Code::LeasedAndPurging,
            format!("{i} is in leases and in purge"),
        );
    }
    if f.known.known() && f.record.is_none() {
        push(
            Code::MissingRecord,
            format!("{i} is leased or purging, but w:{i} is missing"),
        );
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
                format!(
                    "{} exist, but {i} is neither leased nor being purged",
                    keys.join(", ")
                ),
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
            push(
                Code::MissingViewRecord,
                format!("{i} is leased, but the view has no record of it"),
            );
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
        let want = ViewRecord::encode(rec);
        if Some(view) != want.as_ref() {
            let decoded = |b: Option<&Vec<u8>>| b.and_then(|b| ViewRecord::decode(b));
            push(
                Code::StaleViewRecord,
                format!(
                    "view record of {i} is {:?}, its record gives {:?}",
                    decoded(Some(view)),
                    decoded(want.as_ref())
                ),
            );
        }
    }
    if f.known.known() || f.record.is_some() {
        match f.seq.as_deref().and_then(|s| s.parse::<u64>().ok()) {
            Some(seq) if i <= seq => {}
            Some(seq) => push(Code::IncarnationAboveSeq, format!("{i} is above seq {seq}")),
            None => push(
                Code::IncarnationAboveSeq,
                format!("{i} exists, but seq is missing or not a number"),
            ),
        }
    }
    if let Some(rec) = &f.record {
        record_issues(i, rec, f.has_s, &mut push);
    }
    out
}

fn record_issues(
    i: u64,
    rec: &BTreeMap<String, String>,
    has_s: bool,
    push: &mut impl FnMut(Code, String),
) {
    if rec.get("id").is_none_or(|id| id.is_empty()) {
        push(Code::BadRecord, format!("w:{i} has no id"));
    }
    let syncing = rec.get("syncing").map(String::as_str);
    match syncing {
        Some("0") => {}
        Some("1") => {
            if !matches!(
                rec.get("patch_phase").map(String::as_str),
                Some("add" | "remove")
            ) {
                push(
                    Code::BadRecord,
                    format!("w:{i} is syncing without a patch phase add|remove"),
                );
            }
        }
        other => push(
            Code::BadRecord,
            format!("w:{i} has syncing = {other:?}, not 0 or 1"),
        ),
    }
    if has_s && syncing != Some("1") {
        push(
            Code::SyncTargetNotSyncing,
            format!("s:{i} exists, but w:{i} is not syncing"),
        );
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
            format!(
                "ids maps {id:?} to {i}, whose record names {:?}",
                f.record_id
            ),
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
    /// The lease expiry (unix ms) of the router it names, from `routers`.
    pub(crate) router_lease: Option<i64>,
    /// Valkey's clock when read (unix ms).
    pub(crate) now_ms: i64,
}

/// How long after its lease ends a router's in-flight counts may linger
/// before gc (every router runs it every second) must have dropped them.
pub(crate) const DEAD_ROUTER_GRACE_MS: i64 = 5_000;

/// Invariant 4 for one in-flight (or malformed) view field.
pub(crate) fn view_field_issues(f: &ViewFieldFacts) -> Vec<Issue> {
    let mut out = Vec::new();
    match view_field(&f.field) {
        ViewField::Record(_) => {}
        ViewField::Bad => out.push(Issue::new(
            Code::BadViewField,
            format!(
                "view field {:?} is neither <idx>, <idx>:<router>, p<idx>:<router> nor router:<router>",
                f.field
            ),
        )),
        ViewField::RouterLease(router) => {
            if f.value.parse::<i64>().is_err() {
                out.push(Issue::new(
                    Code::BadViewField,
                    format!(
                        "lease of router {router:?} in the view is {:?}, not unix ms",
                        f.value
                    ),
                ));
            }
        }
        ViewField::InFlight(i, router) => {
            out.extend(count_issues(f, i, &router, "requests in flight"));
        }
        ViewField::PrefillTokens(i, router) => {
            out.extend(count_issues(f, i, &router, "prefill tokens in flight"));
        }
    }
    out
}

/// Invariant 4 for one count a router keeps for incarnation `i` (`what`:
/// requests, or their prefill tokens).
fn count_issues(f: &ViewFieldFacts, i: u64, router: &str, what: &str) -> Vec<Issue> {
    let mut out = Vec::new();
    if !f.known.known() {
        out.push(Issue::new(
            Code::InflightOfUnknownIncarnation,
            format!(
                "router {router:?} counts {what} to {i}, which is neither leased nor being purged"
            ),
        ));
    }
    if f.router_lease
        .is_some_and(|lease| lease < f.now_ms - DEAD_ROUTER_GRACE_MS)
    {
        out.push(Issue::new(
            Code::InflightOfDeadRouter,
            format!(
                "router {router:?} counts {what} to {i}, but its lease ended \
                 more than {} s ago: no live request stands behind them (is gc running?)",
                DEAD_ROUTER_GRACE_MS / 1000
            ),
        ));
    }
    if f.value.parse::<i64>().map_or(true, |n| n < 1) {
        out.push(Issue::new(
            Code::BadViewField,
            format!(
                "count {} = {:?} is not a positive integer",
                f.field, f.value
            ),
        ));
    }
    out
}

/// Invariant 3 for one router lease (unix ms).
pub(crate) fn router_issues(router: &str, lease: i64, now_ms: i64, horizon_ms: i64) -> Vec<Issue> {
    if lease > now_ms.saturating_add(horizon_ms) {
        return vec![Issue::new(
            Code::RouterLeaseTooFar,
            format!(
                "lease of router {router:?} ends in {} s",
                (lease - now_ms) / 1000
            ),
        )];
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, syncing: &str) -> BTreeMap<String, String> {
        [("id", id), ("url", "http://h:1"), ("syncing", syncing)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn live(idx: u64) -> IncarnationFacts {
        let rec = record("w0", "0");
        IncarnationFacts {
            idx,
            known: Known {
                lease: Some(2_000),
                purging: false,
            },
            view: ViewRecord::encode(&rec),
            record: Some(rec),
            ids_of_record_id: Some(idx.to_string()),
            seq: Some("7".into()),
            has_r: true,
            now_ms: 1_000,
            horizon_ms: 86_400_000,
            ..IncarnationFacts::default()
        }
    }

    fn codes(f: &IncarnationFacts) -> Vec<Code> {
        incarnation_issues(f).into_iter().map(|i| i.code).collect()
    }

    #[test]
    fn incarnations_are_judged_by_their_bookkeeping() {
        assert!(codes(&live(3)).is_empty());
        assert_eq!(
            codes(&IncarnationFacts {
                view: None,
                ..live(3)
            }),
            [Code::MissingViewRecord]
        );
        assert_eq!(
            codes(&IncarnationFacts {
                ids_of_record_id: Some("4".into()),
                ..live(3)
            }),
            [Code::LeaseNotInIds]
        );
        assert_eq!(codes(&live(8)), [Code::IncarnationAboveSeq]);
        assert_eq!(
            codes(&IncarnationFacts {
                has_s: true,
                ..live(3)
            }),
            [Code::SyncTargetNotSyncing]
        );
        // Neither leased nor purging: its keys and view record are orphans.
        let gone = IncarnationFacts {
            known: Known::default(),
            ..live(3)
        };
        assert_eq!(
            codes(&gone),
            [Code::KeysOfUnknownIncarnation, Code::ViewRecordOfPurged]
        );
        // Draining: no lease needed, no view record required.
        let draining = IncarnationFacts {
            known: Known {
                lease: None,
                purging: true,
            },
            view: None,
            ..live(3)
        };
        assert!(codes(&draining).is_empty());
    }
}
