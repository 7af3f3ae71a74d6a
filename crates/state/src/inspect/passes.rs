//! The streaming passes of `--check` over one model's maps: every forward
//! bucket (HSCAN), every reverse set and every speculative set (SSCAN), a
//! page at a time, each page's cross-checks pipelined. Memory is bounded by
//! a page (plus the candidates kept), whatever the maps' size.

use std::collections::BTreeMap;

use redis::Value;

use super::InspectError;
use super::check::CheckStats;
use super::codes::Code;
use super::conn::{Reader, SCAN_COUNT, bytes, flags, pairs_of, scan_reply};
use super::format::{Entry, parse_value};
use super::inventory::ModelInventory;
use super::meta::ModelMeta;
use super::probe::{Findings, Probe};
use super::rules::{self, EntryFacts, FieldFacts};
use super::schema::{ModelKey, ModelKeys, bucket_of, valid_hash};

/// Codes each pass reports; the other codes of [`rules::entry_issues`] need
/// facts that pass does not read (the re-check reads them all).
const FORWARD: &[Code] = &[
    Code::ForwardWithoutReverse,
    Code::SpeculativeNotInSp,
    Code::EntryOfUnknownIncarnation,
    Code::SpeculativeExpiryTooFar,
];
const REVERSE: &[Code] = &[Code::ReverseWithoutForward];
const SPEC: &[Code] = &[Code::SpMemberNotSpeculative, Code::SpNotInReverse];

/// Forward buckets whose first HSCAN page is fetched in one pipeline.
const BUCKETS_PER_PIPE: usize = 32;
/// Most members in one SMISMEMBER.
const MEMBERS_PER_CMD: usize = 1024;

/// What the passes over one model share.
pub(crate) struct Pass<'a> {
    /// The connection.
    pub(crate) reader: &'a mut Reader,
    /// The model's key names.
    pub(crate) mk: &'a ModelKeys,
    /// The model.
    pub(crate) model: &'a str,
    /// Its keys.
    pub(crate) inv: &'a ModelInventory,
    /// Its small keys, as read before the passes.
    pub(crate) meta: &'a ModelMeta,
    /// The TTL horizon in ms.
    pub(crate) horizon_ms: i64,
    /// Where suspected violations go.
    pub(crate) findings: &'a mut Findings,
    /// Counters.
    pub(crate) stats: &'a mut CheckStats,
}

impl Pass<'_> {
    fn usable(&self, key: &ModelKey) -> Option<String> {
        let name = self.mk.name(key);
        (!self.inv.wrong_type.contains(&name)).then_some(name)
    }

    fn report(&mut self, facts: EntryFacts, owned: &[Code]) {
        let issues: Vec<_> = rules::entry_issues(&facts)
            .into_iter()
            .filter(|i| owned.contains(&i.code))
            .collect();
        if issues.is_empty() {
            return;
        }
        let subject = format!("{} @ {}", facts.hash, facts.idx);
        let probe = Probe::Entry {
            hash: facts.hash,
            idx: facts.idx,
        };
        self.findings
            .add(Some(self.model), &subject, &probe, issues);
    }

    fn facts(
        &self,
        hash: &str,
        idx: u64,
        entry: Option<Entry>,
        in_r: bool,
        in_sp: bool,
    ) -> EntryFacts {
        EntryFacts {
            hash: hash.to_owned(),
            idx,
            entry,
            in_r,
            in_sp,
            known: self.meta.known(idx),
            now_ms: self.meta.now_ms,
            horizon_ms: self.horizon_ms,
        }
    }

    /// Every forward field: well-formed, in its bucket, and each entry
    /// matched by the reverse and speculative sets.
    pub(crate) async fn forward(&mut self) -> Result<(), InspectError> {
        let buckets: Vec<(u16, String)> = self
            .inv
            .buckets
            .iter()
            .filter_map(|&b| self.usable(&ModelKey::Bucket(b)).map(|n| (b, n)))
            .collect();
        for chunk in buckets.chunks(BUCKETS_PER_PIPE) {
            let mut pipe = redis::pipe();
            for (_, name) in chunk {
                pipe.cmd("HSCAN")
                    .arg(name)
                    .arg(0)
                    .arg("COUNT")
                    .arg(SCAN_COUNT);
            }
            let values = self
                .reader
                .pipe("HSCAN of forward buckets", pipe, false)
                .await?;
            let mut page = Vec::new();
            let mut more = Vec::new();
            for ((b, name), v) in chunk.iter().zip(&values) {
                let Some((cursor, items)) = scan_reply(v) else {
                    continue;
                };
                page.extend(pairs_of(&items).into_iter().map(|(f, v)| (*b, f, v)));
                if cursor != 0 {
                    more.push((*b, name, cursor));
                }
            }
            self.fields(page).await?;
            for (b, name, mut cursor) in more {
                while cursor != 0 {
                    let (next, items) = self
                        .reader
                        .scan_page("HSCAN", Some(name), cursor, None)
                        .await?;
                    self.fields(
                        pairs_of(&items)
                            .into_iter()
                            .map(|(f, v)| (b, f, v))
                            .collect(),
                    )
                    .await?;
                    cursor = next;
                }
            }
        }
        Ok(())
    }

    async fn fields(&mut self, page: Vec<(u16, Vec<u8>, Vec<u8>)>) -> Result<(), InspectError> {
        self.stats.forward_fields += page.len() as u64;
        let mut by_idx: BTreeMap<u64, Vec<(String, Entry)>> = BTreeMap::new();
        for (bucket, field, value) in page {
            let facts = FieldFacts {
                bucket,
                field,
                value,
            };
            let issues = rules::field_issues(&facts);
            if !issues.is_empty() {
                let subject = format!("f:{bucket:04x} {}", String::from_utf8_lossy(&facts.field));
                let probe = Probe::Field {
                    bucket,
                    field: facts.field.clone(),
                };
                self.findings
                    .add(Some(self.model), &subject, &probe, issues);
            }
            if !valid_hash(&facts.field) || bucket_of(&facts.field) != bucket {
                continue;
            }
            let hash = String::from_utf8_lossy(&facts.field).into_owned();
            for (idx, e) in parse_value(&facts.value).entries {
                self.stats.entries += 1;
                by_idx.entry(idx).or_default().push((hash.clone(), e));
            }
        }
        let mut pipe = redis::pipe();
        let mut order = Vec::new();
        for (idx, list) in &by_idx {
            let keys = (
                self.usable(&ModelKey::Reverse(*idx)),
                self.usable(&ModelKey::Spec(*idx)),
            );
            let (Some(r), Some(sp)) = keys else { continue };
            for part in list.chunks(MEMBERS_PER_CMD) {
                let hashes: Vec<&str> = part.iter().map(|(h, _)| h.as_str()).collect();
                pipe.cmd("SMISMEMBER").arg(&r).arg(&hashes);
                pipe.cmd("SMISMEMBER").arg(&sp).arg(&hashes);
                order.push((*idx, part));
            }
        }
        if order.is_empty() {
            return Ok(());
        }
        let values = self
            .reader
            .pipe("SMISMEMBER of reverse sets", pipe, false)
            .await?;
        for (n, (idx, part)) in order.into_iter().enumerate() {
            let (Some(in_r), Some(in_sp)) = (
                values.get(2 * n).and_then(flags),
                values.get(2 * n + 1).and_then(flags),
            ) else {
                continue;
            };
            for (((h, e), r), sp) in part.iter().zip(in_r).zip(in_sp) {
                let facts = self.facts(h, idx, Some(*e), r, sp);
                self.report(facts, FORWARD);
            }
        }
        Ok(())
    }

    /// The forward values of `hashes` (valid hashes), pipelined; `None`
    /// where the read failed.
    async fn values_of(
        &mut self,
        hashes: &[String],
    ) -> Result<Vec<Option<Option<Vec<u8>>>>, InspectError> {
        let mut pipe = redis::pipe();
        let mut asked = Vec::with_capacity(hashes.len());
        for h in hashes {
            let bucket = self.usable(&ModelKey::Bucket(bucket_of(h.as_bytes())));
            if let Some(b) = &bucket {
                pipe.cmd("HGET").arg(b).arg(h);
            }
            asked.push(bucket.is_some());
        }
        let values = if asked.iter().any(|a| *a) {
            self.reader
                .pipe("HGET of forward values", pipe, false)
                .await?
        } else {
            Vec::new()
        };
        let mut it = values.iter();
        Ok(asked
            .into_iter()
            .map(|a| if a { it.next().and_then(value) } else { None })
            .collect())
    }

    /// Splits a page of set members into valid hashes, reporting the rest.
    fn members(&mut self, key: &str, items: &[Value]) -> Vec<String> {
        let mut ok = Vec::with_capacity(items.len());
        for m in items.iter().filter_map(bytes) {
            if valid_hash(&m) {
                ok.push(String::from_utf8_lossy(&m).into_owned());
                continue;
            }
            let issues = rules::member_issues(key, &m, true, true);
            let probe = Probe::Member {
                key: key.to_owned(),
                member: m.clone(),
                hash: true,
                zset: false,
            };
            self.findings.add(Some(self.model), key, &probe, issues);
        }
        ok
    }

    /// Every member of every reverse set has its forward entry.
    pub(crate) async fn reverse(&mut self) -> Result<(), InspectError> {
        let sets: Vec<u64> = self.inv.reverse.iter().copied().collect();
        for idx in sets {
            let Some(key) = self.usable(&ModelKey::Reverse(idx)) else {
                continue;
            };
            let mut cursor = 0;
            loop {
                let (next, items) = self
                    .reader
                    .scan_page("SSCAN", Some(&key), cursor, None)
                    .await?;
                self.stats.reverse_members += items.len() as u64;
                let hashes = self.members(&key, &items);
                let values = self.values_of(&hashes).await?;
                for (h, v) in hashes.iter().zip(values) {
                    let Some(v) = v else { continue };
                    let entry = v.and_then(|v| parse_value(&v).entries.get(&idx).copied());
                    let facts = self.facts(h, idx, entry, true, false);
                    self.report(facts, REVERSE);
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }

    /// Every member of every speculative set is in the reverse set and has
    /// a speculative entry.
    pub(crate) async fn speculative(&mut self) -> Result<(), InspectError> {
        let sets: Vec<u64> = self.inv.spec.iter().copied().collect();
        for idx in sets {
            let Some(key) = self.usable(&ModelKey::Spec(idx)) else {
                continue;
            };
            let reverse = self.usable(&ModelKey::Reverse(idx));
            let mut cursor = 0;
            loop {
                let (next, items) = self
                    .reader
                    .scan_page("SSCAN", Some(&key), cursor, None)
                    .await?;
                self.stats.speculative_members += items.len() as u64;
                let hashes = self.members(&key, &items);
                let in_r = match (&reverse, hashes.is_empty()) {
                    (Some(r), false) => {
                        let mut pipe = redis::pipe();
                        pipe.cmd("SMISMEMBER").arg(r).arg(&hashes);
                        let v = self
                            .reader
                            .pipe("SMISMEMBER of a reverse set", pipe, false)
                            .await?;
                        v.first().and_then(flags)
                    }
                    _ => None,
                };
                let values = self.values_of(&hashes).await?;
                if let Some(in_r) = in_r {
                    for ((h, v), r) in hashes.iter().zip(values).zip(in_r) {
                        let Some(v) = v else { continue };
                        let entry = v.and_then(|v| parse_value(&v).entries.get(&idx).copied());
                        let facts = self.facts(h, idx, entry, r, true);
                        self.report(facts, SPEC);
                    }
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }
}

/// An HGET reply: `Some(None)` for nil, `None` for an error.
fn value(v: &Value) -> Option<Option<Vec<u8>>> {
    match v {
        Value::Nil => Some(None),
        Value::ServerError(_) => None,
        other => Some(bytes(other)),
    }
}
