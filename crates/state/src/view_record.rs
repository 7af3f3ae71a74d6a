//! A worker's record in the routing view (`VIEW_FIELDS` of
//! lua/lib_view.lua): seven numbers as little-endian f64 (-1 when unset),
//! then `id\nurl`, then `\nrole` for a prefill or decode worker only.
//! Binary because routing unpacks every record on every call: one
//! `struct.unpack` in Lua, where parsing text cost about 1 µs a record. The
//! role is a suffix, not an eighth number, so that records written before
//! roles existed (and every record of a colocated fleet) stay byte for byte
//! what they were.

use std::collections::BTreeMap;

use protocol::WorkerRole;

/// The worker-record fields a view record holds, in order.
const VIEW_FIELDS: [&str; 9] = [
    "lease_until",
    "synced_until",
    "syncing",
    "waiting",
    "running",
    "kv_usage",
    "load_ms",
    "id",
    "url",
];

const NUMBERS: usize = 7;
const NUMBER_BYTES: usize = NUMBERS * 8;

/// One worker's routing-view record, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewRecord {
    /// Lease expiry, unix ms (0 once deregistered).
    pub lease_until_ms: Option<f64>,
    /// A completed sync keeps confirmed entries alive until then, unix ms.
    pub synced_until_ms: Option<f64>,
    /// A committed sync is being applied.
    pub syncing: bool,
    /// Requests queued, as last reported.
    pub waiting: Option<f64>,
    /// Requests running, as last reported.
    pub running: Option<f64>,
    /// KV cache usage, as last reported.
    pub kv_usage: Option<f64>,
    /// When the load was reported, unix ms.
    pub load_ms: Option<f64>,
    /// The worker's id.
    pub id: String,
    /// Its base URL.
    pub url: String,
    /// Its prefill/decode role (both when the record names none).
    pub role: WorkerRole,
}

impl ViewRecord {
    /// Decodes a record as stored; `None` if it is not one.
    pub fn decode(bytes: &[u8]) -> Option<ViewRecord> {
        let (numbers, text) = bytes.split_at_checked(NUMBER_BYTES)?;
        let mut n = [None; NUMBERS];
        for (slot, chunk) in n.iter_mut().zip(numbers.chunks_exact(8)) {
            let x = f64::from_le_bytes(chunk.try_into().ok()?);
            *slot = (x >= 0.0).then_some(x);
        }
        let (id, rest) = std::str::from_utf8(text).ok()?.split_once('\n')?;
        // A role this build does not know routes as both: a record is never
        // refused for it (the whole routing reply would be).
        let (url, role) = match rest.split_once('\n') {
            Some((url, role)) => (url, role.parse().unwrap_or_default()),
            None => (rest, WorkerRole::Both),
        };
        Some(ViewRecord {
            lease_until_ms: n[0],
            synced_until_ms: n[1],
            syncing: n[2] == Some(1.0),
            waiting: n[3],
            running: n[4],
            kv_usage: n[5],
            load_ms: n[6],
            id: id.to_owned(),
            url: url.to_owned(),
            role,
        })
    }

    /// The record `view_refresh` (lib_view.lua) writes for a worker record's
    /// fields; `None` when the record has no id (purged).
    pub fn encode(record: &BTreeMap<String, String>) -> Option<Vec<u8>> {
        let id = record.get("id")?;
        let mut out = Vec::with_capacity(NUMBER_BYTES + 64);
        for field in &VIEW_FIELDS[..NUMBERS] {
            let x = record
                .get(*field)
                .and_then(|v| lua_number(v))
                .unwrap_or(-1.0);
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.extend_from_slice(id.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(record.get("url").map_or("", String::as_str).as_bytes());
        if let Some(role) = record.get("role").filter(|r| !r.is_empty() && *r != "both") {
            out.push(b'\n');
            out.extend_from_slice(role.as_bytes());
        }
        Some(out)
    }
}

/// Lua's `tonumber` for the decimal numbers the scripts store.
fn lua_number(v: &str) -> Option<f64> {
    v.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn encode_then_decode_keeps_every_field() {
        let rec = record(&[
            ("id", "w-1"),
            ("url", "http://10.0.0.1:8000"),
            ("lease_until", "1795274121956"),
            ("synced_until", "0"),
            ("syncing", "1"),
            ("waiting", "3"),
            ("kv_usage", "0.37"),
        ]);
        let bytes = ViewRecord::encode(&rec).unwrap();
        let v = ViewRecord::decode(&bytes).unwrap();
        assert_eq!(v.id, "w-1");
        assert_eq!(v.url, "http://10.0.0.1:8000");
        assert_eq!(v.lease_until_ms, Some(1_795_274_121_956.0));
        assert_eq!(v.synced_until_ms, Some(0.0));
        assert!(v.syncing);
        assert_eq!(v.waiting, Some(3.0));
        assert_eq!(v.running, None);
        assert_eq!(v.kv_usage, Some(0.37));
        assert_eq!(v.load_ms, None);
        assert_eq!(v.role, WorkerRole::Both);
    }

    #[test]
    fn only_a_prefill_or_decode_role_is_written_and_read_back() {
        let both = record(&[("id", "w"), ("url", "http://h"), ("role", "both")]);
        let plain = record(&[("id", "w"), ("url", "http://h")]);
        assert_eq!(ViewRecord::encode(&both), ViewRecord::encode(&plain));
        for role in [WorkerRole::Prefill, WorkerRole::Decode] {
            let rec = record(&[("id", "w"), ("url", "http://h"), ("role", role.as_str())]);
            let bytes = ViewRecord::encode(&rec).unwrap();
            assert!(bytes.ends_with(format!("w\nhttp://h\n{role}").as_bytes()));
            let v = ViewRecord::decode(&bytes).unwrap();
            assert_eq!((v.url.as_str(), v.role), ("http://h", role));
        }
    }

    #[test]
    fn purged_records_and_garbage_are_not_records() {
        assert_eq!(ViewRecord::encode(&record(&[("url", "http://h")])), None);
        assert_eq!(ViewRecord::decode(b"short"), None);
        assert_eq!(ViewRecord::decode(&[0u8; 56]), None); // no id/url line
    }
}
