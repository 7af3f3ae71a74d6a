//! [`ModelMeta`]: the small keys of one model (leases, purge queue, ids,
//! routers, the routing view, worker records), read with HSCAN/SSCAN/ZSCAN
//! and pipelined HGETALLs. Not one atomic snapshot: the summary shows it as
//! read, and the checker re-reads anything it suspects atomically.

use std::collections::{BTreeMap, BTreeSet};

use super::InspectError;
use super::conn::{Reader, bytes, int, pairs, pairs_of, text};
use super::format::{ViewField, view_field};
use super::inventory::ModelInventory;
use super::rules::Known;
use super::schema::{ModelKey, ModelKeys, parse_idx};
use crate::KeySpace;

/// The small keys of one model, as read.
#[derive(Debug, Default)]
pub(crate) struct ModelMeta {
    /// Server time when the read began, unix ms.
    pub(crate) now_ms: i64,
    /// The model is in `<ns>:models`.
    pub(crate) listed: bool,
    /// `seq`, as stored.
    pub(crate) seq: Option<String>,
    /// `leases`: incarnation → lease expiry (unix ms).
    pub(crate) leases: BTreeMap<u64, i64>,
    /// `purge`: incarnations being purged.
    pub(crate) purge: BTreeSet<u64>,
    /// Members of `leases` (true) or `purge` (false) that are not incarnations.
    pub(crate) bad_members: Vec<(bool, Vec<u8>)>,
    /// `ids`: worker id → incarnation, as stored.
    pub(crate) ids: BTreeMap<String, String>,
    /// `routers`: router id → lease expiry (unix ms).
    pub(crate) routers: BTreeMap<String, i64>,
    /// View records by incarnation.
    pub(crate) view_records: BTreeMap<u64, Vec<u8>>,
    /// Other view fields (in-flight counts, malformed fields) with values.
    pub(crate) view_other: Vec<(String, String)>,
    /// Worker records `w:<idx>` that exist.
    pub(crate) records: BTreeMap<u64, BTreeMap<String, String>>,
    /// The gc sweep position.
    pub(crate) gc: BTreeMap<String, String>,
}

impl ModelMeta {
    /// The standing of `idx` as read.
    pub(crate) fn known(&self, idx: u64) -> Known {
        Known {
            lease: self.leases.get(&idx).copied(),
            purging: self.purge.contains(&idx),
        }
    }

    /// Every incarnation anything of this model names.
    pub(crate) fn incarnations(&self, inv: &ModelInventory) -> BTreeSet<u64> {
        let mut all: BTreeSet<u64> = self.leases.keys().copied().collect();
        all.extend(&self.purge);
        all.extend(self.records.keys());
        all.extend(self.view_records.keys());
        all.extend(&inv.records);
        all.extend(&inv.reverse);
        all.extend(&inv.spec);
        all.extend(&inv.target);
        all
    }

    /// In-flight counts: (incarnation, router, count) of well-formed fields.
    pub(crate) fn in_flight(&self) -> impl Iterator<Item = (u64, &str, i64)> {
        self.view_other
            .iter()
            .filter_map(|(f, v)| match view_field(f) {
                ViewField::InFlight(i, _) => {
                    let router = f.split_once(':').map_or("", |(_, r)| r);
                    Some((i, router, v.parse().unwrap_or(0)))
                }
                _ => None,
            })
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Reads the small keys of one model (skipping keys of the wrong type).
pub(crate) async fn read(
    reader: &mut Reader,
    keys: &KeySpace,
    mk: &ModelKeys,
    model: &str,
    inv: &ModelInventory,
    listed: Option<&std::collections::BTreeSet<String>>,
) -> Result<ModelMeta, InspectError> {
    let mut m = ModelMeta {
        now_ms: reader.now_ms().await?,
        ..ModelMeta::default()
    };
    let usable = |k: &ModelKey| {
        let name = mk.name(k);
        (!inv.wrong_type.contains(&name)).then_some(name)
    };
    // A part of a sharded model (`<model>#<k>`) counts as listed with its
    // model. On a cluster the models set is read once, elsewhere (`listed`).
    m.listed = match listed {
        Some(set) => set.contains(model) || set.contains(crate::part_model(model)),
        None => {
            let reply = reader
                .cmd(
                    "SMISMEMBER models",
                    redis::cmd("SMISMEMBER")
                        .arg(keys.models())
                        .arg(model)
                        .arg(crate::part_model(model)),
                )
                .await?;
            matches!(&reply, redis::Value::Array(v) if v.iter().any(|x| int(x) == Some(1)))
        }
    };
    if let Some(k) = usable(&ModelKey::Seq) {
        m.seq = text(&reader.cmd("GET seq", redis::cmd("GET").arg(&k)).await?);
    }
    if let Some(k) = usable(&ModelKey::Leases) {
        for (member, s) in pairs_of(&reader.scan_all("ZSCAN", &k).await?) {
            match (
                std::str::from_utf8(&member).ok().and_then(parse_idx),
                lossy(&s).parse::<f64>(),
            ) {
                (Some(i), Ok(score)) => {
                    m.leases.insert(i, score as i64);
                }
                _ => m.bad_members.push((true, member)),
            }
        }
    }
    if let Some(k) = usable(&ModelKey::Purge) {
        for v in reader.scan_all("SSCAN", &k).await? {
            let Some(member) = bytes(&v) else { continue };
            match std::str::from_utf8(&member).ok().and_then(parse_idx) {
                Some(i) => {
                    m.purge.insert(i);
                }
                None => m.bad_members.push((false, member)),
            }
        }
    }
    if let Some(k) = usable(&ModelKey::Ids) {
        m.ids = pairs_of(&reader.scan_all("HSCAN", &k).await?)
            .into_iter()
            .map(|(k, v)| (lossy(&k), lossy(&v)))
            .collect();
    }
    if let Some(k) = usable(&ModelKey::Routers) {
        for (r, s) in pairs_of(&reader.scan_all("ZSCAN", &k).await?) {
            let score = lossy(&s).parse::<f64>().map_or(0, |f| f as i64);
            m.routers.insert(lossy(&r), score);
        }
    }
    if let Some(k) = usable(&ModelKey::View) {
        for (f, v) in pairs_of(&reader.scan_all("HSCAN", &k).await?) {
            let f = lossy(&f);
            match view_field(&f) {
                ViewField::Record(i) => {
                    m.view_records.insert(i, v);
                }
                _ => m.view_other.push((f, lossy(&v))),
            }
        }
    }
    if let Some(k) = usable(&ModelKey::Gc) {
        let v = reader
            .cmd("HGETALL gc", redis::cmd("HGETALL").arg(&k))
            .await?;
        m.gc = pairs(&v)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (lossy(&k), lossy(&v)))
            .collect();
    }
    let mut wanted: BTreeSet<u64> = m.leases.keys().copied().collect();
    wanted.extend(&m.purge);
    wanted.extend(&inv.records);
    wanted.extend(m.ids.values().filter_map(|v| parse_idx(v)));
    let wanted: Vec<u64> = wanted
        .into_iter()
        .filter(|i| usable(&ModelKey::Record(*i)).is_some())
        .collect();
    for chunk in wanted.chunks(256) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("HGETALL").arg(mk.name(&ModelKey::Record(*i)));
        }
        let values = reader
            .pipe("HGETALL of worker records", pipe, false)
            .await?;
        for (i, v) in chunk.iter().zip(&values) {
            let rec: BTreeMap<String, String> = pairs(v)
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (lossy(&k), lossy(&v)))
                .collect();
            if !rec.is_empty() {
                m.records.insert(*i, rec);
            }
        }
    }
    Ok(m)
}
