//! The value formats of docs/state.md: forward-map entries
//! (`<idx><s|c|h|d><expiry_s>`, comma-separated) and routing-view records
//! and fields, as the Lua library writes them (`lib_entries.lua`, `lib_view.lua`).

use std::collections::BTreeMap;

use protocol::Tier;

use super::schema::parse_idx;

/// A forward entry's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `s`: claimed on routing.
    Speculative,
    /// `c`, `h`, `d`: reported by the worker, its best copy on the GPU,
    /// the CPU or disk.
    Confirmed(Tier),
}

/// One entry `<idx><kind><expiry_s>` of a forward value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The incarnation.
    pub(crate) idx: u64,
    /// Speculative or confirmed.
    pub(crate) kind: Kind,
    /// Unix seconds.
    pub(crate) expiry_s: u64,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = match self.kind {
            Kind::Speculative => 's',
            Kind::Confirmed(t) => t.entry_kind(),
        };
        write!(f, "{}{k}{}", self.idx, self.expiry_s)
    }
}

/// A forward value split into entries: the first entry of each incarnation
/// (the one lib_entries.lua's `entry_of` finds), and what is wrong with the rest.
#[derive(Debug, Default)]
pub(crate) struct ParsedValue {
    /// Well-formed entries, one per incarnation.
    pub(crate) entries: BTreeMap<u64, Entry>,
    /// Malformed tokens and repeated incarnations, described.
    pub(crate) problems: Vec<String>,
}

/// Parses a forward value (`3c1763712345,12s1763712301`).
pub(crate) fn parse_value(v: &[u8]) -> ParsedValue {
    let mut out = ParsedValue::default();
    let Ok(v) = std::str::from_utf8(v) else {
        out.problems.push("value is not UTF-8".into());
        return out;
    };
    if v.is_empty() {
        out.problems.push("empty value".into());
        return out;
    }
    for token in v.split(',') {
        match parse_entry(token) {
            Some(e) => match out.entries.entry(e.idx) {
                std::collections::btree_map::Entry::Occupied(_) => out
                    .problems
                    .push(format!("incarnation {} has two entries", e.idx)),
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(e);
                }
            },
            None => out
                .problems
                .push(format!("entry {token:?} is not <idx><s|c|h|d><expiry_s>")),
        }
    }
    out
}

fn parse_entry(token: &str) -> Option<Entry> {
    let pos = token.find(|c: char| !c.is_ascii_digit())?;
    let idx = parse_idx(&token[..pos])?;
    let letter = char::from(token.as_bytes()[pos]);
    let kind = match letter {
        's' => Kind::Speculative,
        other => Kind::Confirmed(Tier::from_entry_kind(other)?),
    };
    let exp = &token[pos + 1..];
    if exp.is_empty() || !exp.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Entry {
        idx,
        kind,
        expiry_s: exp.parse().ok()?,
    })
}

/// A routing-view field: an incarnation's record, a router's in-flight
/// count for one (`<idx>:<router>`) and their prefill tokens
/// (`p<idx>:<router>`), or a router's lease (`router:<id>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ViewField {
    /// `<idx>`
    Record(u64),
    /// `<idx>:<router>`
    InFlight(u64, String),
    /// `p<idx>:<router>`
    PrefillTokens(u64, String),
    /// `router:<router>`
    RouterLease(String),
    /// Anything else.
    Bad,
}

/// Classifies a routing-view field name.
pub(crate) fn view_field(field: &str) -> ViewField {
    if let Some(router) = field.strip_prefix("router:") {
        return if router.is_empty() {
            ViewField::Bad
        } else {
            ViewField::RouterLease(router.to_owned())
        };
    }
    if let Some(count) = field.strip_prefix('p') {
        return match view_field(count) {
            ViewField::InFlight(i, router) => ViewField::PrefillTokens(i, router),
            _ => ViewField::Bad,
        };
    }
    match field.split_once(':') {
        None => parse_idx(field).map_or(ViewField::Bad, ViewField::Record),
        Some((idx, router)) if !router.is_empty() => match parse_idx(idx) {
            Some(i) => ViewField::InFlight(i, router.to_owned()),
            None => ViewField::Bad,
        },
        Some(_) => ViewField::Bad,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_parsed_like_entry_of() {
        let p = parse_value(b"3c1763712345,12s1763712301,4h1,5d2");
        assert!(p.problems.is_empty());
        assert_eq!(p.entries[&3].kind, Kind::Confirmed(Tier::Gpu));
        assert_eq!(p.entries[&4].kind, Kind::Confirmed(Tier::Cpu));
        assert_eq!(p.entries[&5].kind, Kind::Confirmed(Tier::Disk));
        assert_eq!(p.entries[&12].expiry_s, 1763712301);
        assert_eq!(p.entries[&4].to_string(), "4h1");
        for bad in [
            "", "3x1", "3c", "c1", "03c1", "3c1,3s2", "3c1,,4c1", "3c1x", "3h", "3e1", "3h1,3d1",
        ] {
            assert!(!parse_value(bad.as_bytes()).problems.is_empty(), "{bad:?}");
        }
    }

    #[test]
    fn view_fields() {
        assert_eq!(view_field("3"), ViewField::Record(3));
        assert_eq!(view_field("3:r:1"), ViewField::InFlight(3, "r:1".into()));
        assert_eq!(view_field("x"), ViewField::Bad);
        assert_eq!(
            view_field("router:r:1"),
            ViewField::RouterLease("r:1".into())
        );
        assert_eq!(view_field("router:"), ViewField::Bad);
        assert_eq!(view_field("3:"), ViewField::Bad);
    }
}
