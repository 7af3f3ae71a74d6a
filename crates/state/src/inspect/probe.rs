//! Suspected violations ([`Candidate`]) and their re-check: a [`Probe`]
//! names the few keys and fields that decide one violation; after a delay
//! they are read again in one MULTI/EXEC (so no script runs in between) and
//! the same rule of `rules.rs` judges them. Every mutation is one atomic
//! script, so a violation that survives an atomic re-read is real, not a
//! scan that saw a script's work half before and half after.

use redis::Value;

use super::InspectError;
use super::codes::{Code, Issue};
use super::conn::{Reader, bytes, int, is_error, pairs, score, text, time_ms};
use super::format::{ViewField, parse_value, view_field};
use super::rules::{
    self, EntryFacts, IncarnationFacts, KeyFacts, Known, ViewFieldFacts, WorkerIdFacts,
};
use super::schema::{KeyClass, ModelKey, ModelKeys, bucket_of, parse_idx};
use crate::KeySpace;

/// What to read again to re-judge one suspected violation.
#[derive(Debug, Clone)]
pub(crate) enum Probe {
    /// A key's type and TTL.
    Key { key: Vec<u8>, class: KeyClass },
    /// Whether the model is in `<ns>:models`.
    Model,
    /// A (hash, incarnation) pair across the forward and reverse maps.
    Entry { hash: String, idx: u64 },
    /// One forward field.
    Field { bucket: u16, field: Vec<u8> },
    /// A member of a set (`zset`: a sorted set) that should be a hash
    /// (`hash`) or an incarnation.
    Member {
        key: String,
        member: Vec<u8>,
        hash: bool,
        zset: bool,
    },
    /// An incarnation's lease, record, view record and keys.
    Incarnation { idx: u64, record_id: Option<String> },
    /// One entry of `ids`.
    WorkerId { id: String, idx: String },
    /// One in-flight field of the view.
    ViewField { field: String },
    /// One router's lease.
    Router { router: String },
}

/// A violation seen by the scan, not yet confirmed.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// What the scan saw.
    pub(crate) issue: Issue,
    /// The model, for model keys.
    pub(crate) model: Option<String>,
    /// The key, hash or incarnation concerned, for display.
    pub(crate) subject: String,
    /// How to re-judge it.
    pub(crate) probe: Probe,
}

fn known(lease: &Value, purge: &Value) -> Known {
    Known {
        lease: score(lease),
        purging: int(purge) == Some(1),
    }
}

fn record(v: &Value) -> Option<std::collections::BTreeMap<String, String>> {
    let map: std::collections::BTreeMap<String, String> = pairs(v)?
        .into_iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(&k).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            )
        })
        .collect();
    (!map.is_empty()).then_some(map)
}

impl Probe {
    /// Adds this probe's reads to `pipe`; returns how many it added.
    fn push(
        &self,
        keys: &KeySpace,
        mk: Option<&ModelKeys>,
        model: Option<&str>,
        pipe: &mut redis::Pipeline,
    ) -> usize {
        match (self, mk) {
            (Probe::Key { key, .. }, _) => {
                pipe.cmd("TYPE").arg(key).cmd("PTTL").arg(key);
                2
            }
            (Probe::Model, _) => {
                let model = model.unwrap_or("");
                pipe.cmd("SISMEMBER").arg(keys.models()).arg(model);
                pipe.cmd("SISMEMBER")
                    .arg(keys.models())
                    .arg(crate::part_model(model));
                2
            }
            (
                Probe::Member {
                    key, member, zset, ..
                },
                _,
            ) => {
                pipe.cmd(if *zset { "ZSCORE" } else { "SISMEMBER" })
                    .arg(key)
                    .arg(member);
                1
            }
            (_, Some(mk)) => self.push_model(mk, pipe),
            (_, None) => 0,
        }
    }

    fn push_model(&self, mk: &ModelKeys, pipe: &mut redis::Pipeline) -> usize {
        let k = |key: ModelKey| mk.name(&key);
        match self {
            Probe::Key { .. } | Probe::Model | Probe::Member { .. } => 0,
            Probe::Entry { hash, idx } => {
                pipe.cmd("HGET")
                    .arg(k(ModelKey::Bucket(bucket_of(hash.as_bytes()))))
                    .arg(hash);
                pipe.cmd("SISMEMBER")
                    .arg(k(ModelKey::Reverse(*idx)))
                    .arg(hash);
                pipe.cmd("SISMEMBER").arg(k(ModelKey::Spec(*idx))).arg(hash);
                pipe.cmd("ZSCORE").arg(k(ModelKey::Leases)).arg(idx);
                pipe.cmd("SISMEMBER").arg(k(ModelKey::Purge)).arg(idx);
                5
            }
            Probe::Field { bucket, field } => {
                pipe.cmd("HGET")
                    .arg(k(ModelKey::Bucket(*bucket)))
                    .arg(field);
                1
            }
            Probe::Incarnation { idx, record_id } => {
                pipe.cmd("ZSCORE").arg(k(ModelKey::Leases)).arg(idx);
                pipe.cmd("SISMEMBER").arg(k(ModelKey::Purge)).arg(idx);
                pipe.cmd("HGETALL").arg(k(ModelKey::Record(*idx)));
                pipe.cmd("HGET").arg(k(ModelKey::View)).arg(idx);
                pipe.cmd("HGET")
                    .arg(k(ModelKey::Ids))
                    .arg(record_id.as_deref().unwrap_or(""));
                pipe.cmd("GET").arg(k(ModelKey::Seq));
                for key in [ModelKey::Reverse(*idx), ModelKey::Spec(*idx)] {
                    pipe.cmd("EXISTS").arg(k(key));
                }
                // The sync target or its tiers (the same rules hold for both).
                pipe.cmd("EXISTS")
                    .arg(k(ModelKey::Target(*idx)))
                    .arg(k(ModelKey::TargetTiers(*idx)));
                9
            }
            Probe::WorkerId { id, idx } => {
                pipe.cmd("HGET").arg(k(ModelKey::Ids)).arg(id);
                pipe.cmd("ZSCORE").arg(k(ModelKey::Leases)).arg(idx);
                pipe.cmd("SISMEMBER").arg(k(ModelKey::Purge)).arg(idx);
                pipe.cmd("HGET")
                    .arg(format!("{}:w:{idx}", mk.base()))
                    .arg("id");
                4
            }
            Probe::ViewField { field } => {
                // A prefill count (`p<idx>:<router>`) names its incarnation
                // after the `p`.
                let (idx, router) = match view_field(field) {
                    ViewField::InFlight(i, r) | ViewField::PrefillTokens(i, r) => {
                        (i.to_string(), r)
                    }
                    _ => (String::new(), String::new()),
                };
                pipe.cmd("HGET").arg(k(ModelKey::View)).arg(field);
                pipe.cmd("ZSCORE").arg(k(ModelKey::Leases)).arg(&idx);
                pipe.cmd("SISMEMBER").arg(k(ModelKey::Purge)).arg(&idx);
                pipe.cmd("ZSCORE").arg(k(ModelKey::Routers)).arg(&router);
                4
            }
            Probe::Router { router } => {
                pipe.cmd("ZSCORE").arg(k(ModelKey::Routers)).arg(router);
                1
            }
        }
    }

    /// The issues the re-read values `v` show; `None` when a read failed
    /// (the suspicion then stands).
    fn judge(
        &self,
        v: &[Value],
        now_ms: i64,
        horizon_ms: i64,
        model: Option<&str>,
    ) -> Option<Vec<Issue>> {
        if v.iter().any(is_error) {
            return None;
        }
        Some(match self {
            Probe::Key { class, .. } => rules::key_issues(&KeyFacts {
                class: class.clone(),
                type_name: text(&v[0])?,
                pttl: int(&v[1])?,
            }),
            Probe::Model => rules::model_issues(
                model.unwrap_or(""),
                int(&v[0]) == Some(1) || int(&v[1]) == Some(1),
            ),
            Probe::Entry { hash, idx } => {
                let entry =
                    bytes(&v[0]).and_then(|val| parse_value(&val).entries.get(idx).copied());
                rules::entry_issues(&EntryFacts {
                    hash: hash.clone(),
                    idx: *idx,
                    entry,
                    in_r: int(&v[1]) == Some(1),
                    in_sp: int(&v[2]) == Some(1),
                    known: known(&v[3], &v[4]),
                    now_ms,
                    horizon_ms,
                })
            }
            Probe::Field { bucket, field } => match bytes(&v[0]) {
                Some(value) => rules::field_issues(&rules::FieldFacts {
                    bucket: *bucket,
                    field: field.clone(),
                    value,
                }),
                None => Vec::new(),
            },
            Probe::Member {
                key,
                member,
                hash,
                zset,
            } => {
                let present = if *zset {
                    score(&v[0]).is_some()
                } else {
                    int(&v[0]) == Some(1)
                };
                rules::member_issues(key, member, *hash, present)
            }
            Probe::Incarnation { idx, .. } => rules::incarnation_issues(&IncarnationFacts {
                idx: *idx,
                known: known(&v[0], &v[1]),
                record: record(&v[2]),
                view: bytes(&v[3]),
                ids_of_record_id: text(&v[4]),
                seq: text(&v[5]),
                has_r: int(&v[6]) == Some(1),
                has_sp: int(&v[7]) == Some(1),
                has_s: int(&v[8]).is_some_and(|n| n > 0),
                now_ms,
                horizon_ms,
            }),
            Probe::WorkerId { id, idx } => {
                if text(&v[0]).as_deref() != Some(idx.as_str()) {
                    return Some(Vec::new()); // remapped since: judged afresh next run
                }
                let k = if parse_idx(idx).is_some() {
                    known(&v[1], &v[2])
                } else {
                    Known::default()
                };
                rules::worker_id_issues(&WorkerIdFacts {
                    id: id.clone(),
                    idx: idx.clone(),
                    known: k,
                    record_id: text(&v[3]),
                })
            }
            Probe::ViewField { field } => match text(&v[0]) {
                Some(value) => rules::view_field_issues(&ViewFieldFacts {
                    field: field.clone(),
                    value,
                    known: known(&v[1], &v[2]),
                    router_lease: score(&v[3]),
                    now_ms,
                }),
                None => Vec::new(),
            },
            Probe::Router { router } => match score(&v[0]) {
                Some(lease) => rules::router_issues(router, lease, now_ms, horizon_ms),
                None => Vec::new(),
            },
        })
    }
}

/// Candidates re-read per MULTI/EXEC (a few hundred reads: well under a
/// millisecond of server time).
const RECHECK_BATCH: usize = 32;

/// Re-reads every candidate atomically (per batch) and returns, in order,
/// the confirmed ones with their current detail; the rest were transient.
pub(crate) async fn recheck(
    reader: &mut Reader,
    keys: &KeySpace,
    horizon_ms: i64,
    candidates: Vec<Candidate>,
) -> Result<Vec<Candidate>, InspectError> {
    let mut confirmed = Vec::new();
    for batch in candidates.chunks(RECHECK_BATCH) {
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        let mut counts = Vec::with_capacity(batch.len());
        for c in batch {
            let mk = c.model.as_deref().map(|m| ModelKeys::new(keys, m));
            counts.push(
                c.probe
                    .push(keys, mk.as_ref(), c.model.as_deref(), &mut pipe),
            );
        }
        let values = reader
            .pipe("re-checking suspected violations", pipe, true)
            .await?;
        let now_ms = values
            .first()
            .and_then(time_ms)
            .ok_or_else(|| InspectError::Reply {
                context: "MULTI/EXEC re-check".into(),
                detail: format!("{} replies, no TIME", values.len()),
            })?;
        let mut at = 1;
        for (c, n) in batch.iter().zip(counts) {
            let vals = values.get(at..at + n).unwrap_or(&[]);
            at += n;
            let verdict = if vals.len() == n {
                c.probe.judge(vals, now_ms, horizon_ms, c.model.as_deref())
            } else {
                None
            };
            match verdict {
                None => confirmed.push(c.clone()),
                Some(issues) => {
                    if let Some(now) = issues.into_iter().find(|i| i.code == c.issue.code) {
                        confirmed.push(Candidate {
                            issue: now,
                            ..c.clone()
                        });
                    }
                }
            }
        }
    }
    Ok(confirmed)
}

/// The candidates kept for re-checking (at most a cap) and a count of the
/// rest, which are reported unverified.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// Kept candidates, in discovery order.
    pub(crate) candidates: Vec<Candidate>,
    /// Candidates beyond the cap, by code.
    pub(crate) overflow: std::collections::BTreeMap<Code, u64>,
    cap: usize,
}

impl Findings {
    /// Keeps at most `cap` candidates for re-checking.
    pub(crate) fn new(cap: usize) -> Self {
        Findings {
            cap,
            ..Findings::default()
        }
    }

    /// Records each of `issues` about `subject`, re-checked by `probe`.
    pub(crate) fn add(
        &mut self,
        model: Option<&str>,
        subject: &str,
        probe: &Probe,
        issues: Vec<Issue>,
    ) {
        for issue in issues {
            if self.candidates.len() >= self.cap {
                *self.overflow.entry(issue.code).or_default() += 1;
                continue;
            }
            self.candidates.push(Candidate {
                issue,
                model: model.map(str::to_owned),
                subject: subject.to_owned(),
                probe: probe.clone(),
            });
        }
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
