//! [`Inventory`]: one `SCAN` over the namespace (never `KEYS`), sorting each
//! key into its model and kind. With a [`Findings`], each page's keys also
//! get `TYPE` and `PTTL` (pipelined) and are judged by the key hygiene rules.

use std::collections::{BTreeMap, BTreeSet};

use super::InspectError;
use super::codes::Code;
use super::conn::{Reader, bytes, int, text};
use super::probe::{Findings, Probe};
use super::rules::{self, KeyFacts};
use super::schema::{KeyClass, ModelKey, classify, glob_escape};

/// The keys one model has, by kind; what the per-model reads iterate over.
#[derive(Debug, Default)]
pub(crate) struct ModelInventory {
    /// Forward buckets (`f:<bucket>`), as numbers.
    pub(crate) buckets: Vec<u16>,
    /// Incarnations with a record `w:<idx>`.
    pub(crate) records: BTreeSet<u64>,
    /// Incarnations with a reverse set `r:<idx>`.
    pub(crate) reverse: BTreeSet<u64>,
    /// Incarnations with a speculative set `sp:<idx>`.
    pub(crate) spec: BTreeSet<u64>,
    /// Incarnations with a sync target `s:<idx>`.
    pub(crate) target: BTreeSet<u64>,
    /// Staged, uncommitted syncs.
    pub(crate) stages: u64,
    /// All keys of the model's routing state (the response cache's keys,
    /// which expire by themselves, are counted apart).
    pub(crate) keys: u64,
    /// Response cache keys (entries and their budget's accounting).
    pub(crate) response_cache: u64,
    /// Keys of the model whose type is wrong (they are not read further).
    pub(crate) wrong_type: BTreeSet<String>,
}

impl ModelInventory {
    fn add(&mut self, key: &ModelKey) {
        if key.is_response_cache() {
            self.response_cache += 1;
            return;
        }
        self.keys += 1;
        match key {
            ModelKey::Bucket(b) => self.buckets.push(*b),
            ModelKey::Record(i) => {
                self.records.insert(*i);
            }
            ModelKey::Reverse(i) => {
                self.reverse.insert(*i);
            }
            ModelKey::Spec(i) => {
                self.spec.insert(*i);
            }
            // The target's tiers live and die with the target: the same
            // rules (only while syncing, of a known incarnation) hold.
            ModelKey::Target(i) | ModelKey::TargetTiers(i) => {
                self.target.insert(*i);
            }
            ModelKey::Stage(..) => self.stages += 1,
            _ => {}
        }
    }
}

/// Every key under the namespace, sorted by model.
#[derive(Debug, Default)]
pub(crate) struct Inventory {
    /// Per model (the `--model`, or every model with keys).
    pub(crate) models: BTreeMap<String, ModelInventory>,
    /// Keys scanned.
    pub(crate) keys: u64,
    /// Keys outside the schema.
    pub(crate) unknown: u64,
}

/// Scans the keys of namespace `ns` (of model `only` if given). With
/// `findings`, also checks each key's type and TTL.
pub(crate) async fn scan(
    reader: &mut Reader,
    ns: &str,
    only: Option<&str>,
    mut findings: Option<&mut Findings>,
) -> Result<Inventory, InspectError> {
    let pattern = match only {
        Some(m) => format!("{}:{{{}}}:*", glob_escape(ns), glob_escape(m)),
        None => format!("{}:*", glob_escape(ns)),
    };
    let mut inv = Inventory::default();
    if let Some(m) = only {
        inv.models.entry(m.to_owned()).or_default();
    }
    let mut cursor = 0;
    loop {
        let (next, items) = reader
            .scan_page("SCAN", None, cursor, Some(&pattern))
            .await?;
        let names: Vec<Vec<u8>> = items.iter().filter_map(bytes).collect();
        let classes: Vec<KeyClass> = names.iter().map(|k| classify(ns, k)).collect();
        let typed = match findings.as_deref_mut() {
            Some(_) => Some(types(reader, &names).await?),
            None => None,
        };
        for (i, (name, class)) in names.iter().zip(&classes).enumerate() {
            inv.keys += 1;
            let model = match class {
                KeyClass::Model { model, key } => {
                    if only.is_some_and(|m| m != model) {
                        continue;
                    }
                    inv.models.entry(model.clone()).or_default().add(key);
                    Some(model.as_str())
                }
                KeyClass::Unknown(_) => {
                    inv.unknown += 1;
                    None
                }
                _ => None,
            };
            let (Some(f), Some((type_name, pttl))) = (
                findings.as_deref_mut(),
                typed.as_ref().and_then(|t| t.get(i)),
            ) else {
                continue;
            };
            let issues = rules::key_issues(&KeyFacts {
                class: class.clone(),
                type_name: type_name.clone(),
                pttl: *pttl,
            });
            let shown = String::from_utf8_lossy(name).into_owned();
            if let Some(m) = model
                && issues.iter().any(|i| i.code == Code::WrongType)
                && let Some(mi) = inv.models.get_mut(m)
            {
                mi.wrong_type.insert(shown.clone());
            }
            let probe = Probe::Key {
                key: name.clone(),
                class: class.clone(),
            };
            f.add(model, &shown, &probe, issues);
        }
        if next == 0 {
            return Ok(inv);
        }
        cursor = next;
    }
}

/// `TYPE` and `PTTL` of each key, pipelined (`none`/-2 when unreadable).
async fn types(reader: &mut Reader, names: &[Vec<u8>]) -> Result<Vec<(String, i64)>, InspectError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for k in names {
        pipe.cmd("TYPE").arg(k).cmd("PTTL").arg(k);
    }
    let v = reader
        .pipe("TYPE and PTTL of scanned keys", pipe, false)
        .await?;
    Ok(v.chunks(2)
        .map(|p| {
            let t = p.first().and_then(text).unwrap_or_else(|| "none".into());
            let ttl = p.get(1).and_then(int).unwrap_or(-2);
            (t, ttl)
        })
        .collect())
}

/// The models to report: those listed in `<ns>:models` and those with keys
/// (or just `--model`).
pub(crate) fn model_names(
    inv: &Inventory,
    listed: &BTreeSet<String>,
    only: Option<&str>,
) -> Vec<String> {
    match only {
        Some(m) => vec![m.to_owned()],
        None => listed
            .iter()
            .chain(inv.models.keys())
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
    }
}
