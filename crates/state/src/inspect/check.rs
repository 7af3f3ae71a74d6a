//! `inspect --check`: the invariants of docs/state.md, verified by one scan
//! (key inventory, small keys, then the maps streamed page by page) and an
//! atomic re-check of every suspected violation after a delay (see
//! `probe.rs`): the fleet may keep running while it reads.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use super::InspectError;
use super::codes::Code;
use super::conn::{Reader, bytes};
use super::format::{ViewField, view_field};
use super::inventory::{self, ModelInventory};
use super::meta::{self, ModelMeta};
use super::passes::Pass;
use super::probe::{Findings, Probe, recheck};
use super::rules::{self, IncarnationFacts, Known, ViewFieldFacts, WorkerIdFacts};
use super::schema::{ModelKey, ModelKeys, parse_idx};
use crate::KeySpace;

/// Suspected violations kept for the re-check; beyond this they are
/// counted (and reported as unverified violations) but not kept.
pub const MAX_CANDIDATES: usize = 10_000;

/// How much `--check` read.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckStats {
    /// Models checked.
    pub models: u64,
    /// Keys scanned.
    pub keys: u64,
    /// Incarnations checked.
    pub incarnations: u64,
    /// Forward fields (block hashes) read.
    pub forward_fields: u64,
    /// Forward entries read.
    pub entries: u64,
    /// Reverse-set members read.
    pub reverse_members: u64,
    /// Speculative-set members read.
    pub speculative_members: u64,
}

/// One confirmed violation.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// The invariant (1 to 5) it breaks.
    pub invariant: u8,
    /// What kind of violation.
    pub code: Code,
    /// The model, for a model's keys.
    pub model: Option<String>,
    /// The key, `<hash> @ <incarnation>`, or incarnation concerned.
    pub subject: String,
    /// The particulars.
    pub detail: String,
}

/// The outcome of `--check`.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// The Valkey URL, password redacted.
    pub valkey: String,
    /// The `--key-prefix`.
    pub namespace: String,
    /// No violation.
    pub clean: bool,
    /// Violations: confirmed plus unverified.
    pub violations: u64,
    /// Seen by the scan and again by the atomic re-check.
    pub confirmed: u64,
    /// Beyond the first [`MAX_CANDIDATES`]: not re-checked, counted as violations.
    pub unverified: u64,
    /// Seen by the scan but gone on the re-check (concurrent changes).
    pub transient: u64,
    /// Violations per code.
    pub by_code: BTreeMap<Code, u64>,
    /// Violations per invariant.
    pub by_invariant: BTreeMap<u8, u64>,
    /// The first violations, in full.
    pub shown: Vec<Violation>,
    /// The delay before the re-check.
    pub recheck_delay_ms: u64,
    /// What was read.
    pub stats: CheckStats,
}

/// How to check: the namespace, model filter and thresholds.
pub(crate) struct CheckSettings<'a> {
    pub(crate) keys: &'a KeySpace,
    pub(crate) namespace: &'a str,
    pub(crate) model: Option<&'a str>,
    pub(crate) horizon: Duration,
    pub(crate) recheck_delay: Duration,
    pub(crate) show: usize,
    /// On one node of a cluster: the models set, read through the cluster
    /// (its key may live on another node); only the models whose keys are
    /// on this node are checked.
    pub(crate) listed: Option<&'a BTreeSet<String>>,
}

/// Runs the whole check.
pub(crate) async fn check(
    reader: &mut Reader,
    s: &CheckSettings<'_>,
) -> Result<CheckReport, InspectError> {
    let horizon_ms = i64::try_from(s.horizon.as_millis()).unwrap_or(i64::MAX);
    let mut findings = Findings::new(MAX_CANDIDATES);
    let mut stats = CheckStats::default();
    let inv = inventory::scan(reader, s.namespace, s.model, Some(&mut findings)).await?;
    stats.keys = inv.keys;
    let listed = match (s.model, s.listed) {
        (Some(_), _) | (None, Some(_)) => Default::default(),
        (None, None) => reader
            .scan_all("SSCAN", &s.keys.models())
            .await?
            .iter()
            .filter_map(bytes)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .collect(),
    };
    let empty = ModelInventory::default();
    for model in inventory::model_names(&inv, &listed, s.model) {
        if s.listed.is_some() && !inv.models.contains_key(&model) {
            continue;
        }
        stats.models += 1;
        let mk = ModelKeys::new(s.keys, &model);
        let mi = inv.models.get(&model).unwrap_or(&empty);
        let meta = meta::read(reader, s.keys, &mk, &model, mi, s.listed).await?;
        if mi.keys > 0 {
            findings.add(
                Some(&model),
                &model,
                &Probe::Model,
                rules::model_issues(&model, meta.listed),
            );
        }
        small_keys(
            &mk,
            &model,
            mi,
            &meta,
            horizon_ms,
            &mut findings,
            &mut stats,
        );
        let mut pass = Pass {
            reader: &mut *reader,
            mk: &mk,
            model: &model,
            inv: mi,
            meta: &meta,
            horizon_ms,
            findings: &mut findings,
            stats: &mut stats,
        };
        pass.forward().await?;
        pass.reverse().await?;
        pass.speculative().await?;
    }
    let suspected = findings.candidates.len() as u64;
    if suspected > 0 && !s.recheck_delay.is_zero() {
        tokio::time::sleep(s.recheck_delay).await;
    }
    let confirmed = recheck(reader, s.keys, horizon_ms, findings.candidates).await?;
    let mut by_code: BTreeMap<Code, u64> = findings.overflow.clone();
    for c in &confirmed {
        *by_code.entry(c.issue.code).or_default() += 1;
    }
    let mut by_invariant = BTreeMap::new();
    for (code, n) in &by_code {
        *by_invariant.entry(code.invariant()).or_default() += n;
    }
    let unverified: u64 = findings.overflow.values().sum();
    let n = confirmed.len() as u64;
    Ok(CheckReport {
        valkey: reader.url().to_owned(),
        namespace: s.namespace.to_owned(),
        clean: n + unverified == 0,
        violations: n + unverified,
        confirmed: n,
        unverified,
        transient: suspected - n,
        by_code,
        by_invariant,
        shown: confirmed
            .into_iter()
            .take(s.show)
            .map(|c| Violation {
                invariant: c.issue.code.invariant(),
                code: c.issue.code,
                model: c.model,
                subject: c.subject,
                detail: c.issue.detail,
            })
            .collect(),
        recheck_delay_ms: u64::try_from(s.recheck_delay.as_millis()).unwrap_or(u64::MAX),
        stats,
    })
}

/// Invariants 2 to 4 over the small keys: incarnations, ids, the view's
/// in-flight fields, router leases, members of leases and purge.
fn small_keys(
    mk: &ModelKeys,
    model: &str,
    mi: &ModelInventory,
    meta: &ModelMeta,
    horizon_ms: i64,
    findings: &mut Findings,
    stats: &mut CheckStats,
) {
    let m = Some(model);
    for idx in meta.incarnations(mi) {
        stats.incarnations += 1;
        let record = meta.records.get(&idx).cloned();
        let record_id = record.as_ref().and_then(|r| r.get("id")).cloned();
        let facts = IncarnationFacts {
            idx,
            known: meta.known(idx),
            ids_of_record_id: record_id.as_ref().and_then(|id| meta.ids.get(id)).cloned(),
            record,
            view: meta.view_records.get(&idx).cloned(),
            seq: meta.seq.clone(),
            has_r: mi.reverse.contains(&idx),
            has_sp: mi.spec.contains(&idx),
            has_s: mi.target.contains(&idx),
            now_ms: meta.now_ms,
            horizon_ms,
        };
        let probe = Probe::Incarnation { idx, record_id };
        findings.add(
            m,
            &format!("incarnation {idx}"),
            &probe,
            rules::incarnation_issues(&facts),
        );
    }
    for (id, idx) in &meta.ids {
        let parsed = parse_idx(idx);
        let facts = WorkerIdFacts {
            id: id.clone(),
            idx: idx.clone(),
            known: parsed.map_or(Known::default(), |i| meta.known(i)),
            record_id: parsed
                .and_then(|i| meta.records.get(&i))
                .and_then(|r| r.get("id"))
                .cloned(),
        };
        let probe = Probe::WorkerId {
            id: id.clone(),
            idx: idx.clone(),
        };
        findings.add(
            m,
            &format!("ids {id:?}"),
            &probe,
            rules::worker_id_issues(&facts),
        );
    }
    for (field, value) in &meta.view_other {
        let known = match view_field(field) {
            ViewField::InFlight(i, _) | ViewField::PrefillTokens(i, _) => meta.known(i),
            _ => Known::default(),
        };
        let router_lease = match view_field(field) {
            ViewField::InFlight(_, r) | ViewField::PrefillTokens(_, r) => {
                meta.routers.get(&r).copied()
            }
            _ => None,
        };
        let facts = ViewFieldFacts {
            field: field.clone(),
            value: value.clone(),
            known,
            router_lease,
            now_ms: meta.now_ms,
        };
        let probe = Probe::ViewField {
            field: field.clone(),
        };
        findings.add(
            m,
            &format!("view {field:?}"),
            &probe,
            rules::view_field_issues(&facts),
        );
    }
    for (router, lease) in &meta.routers {
        let probe = Probe::Router {
            router: router.clone(),
        };
        let issues = rules::router_issues(router, *lease, meta.now_ms, horizon_ms);
        findings.add(m, &format!("router {router:?}"), &probe, issues);
    }
    for (zset, member) in &meta.bad_members {
        let key = mk.name(if *zset {
            &ModelKey::Leases
        } else {
            &ModelKey::Purge
        });
        let probe = Probe::Member {
            key: key.clone(),
            member: member.clone(),
            hash: false,
            zset: *zset,
        };
        findings.add(
            m,
            &key,
            &probe,
            rules::member_issues(&key, member, false, true),
        );
    }
}
