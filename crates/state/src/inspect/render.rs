//! Human-readable output: aligned tables for the summary, one line per
//! violation for the check. `--json` prints the same structs with serde.

use std::io::Write;

use super::check::CheckReport;
use super::summary::{ModelSummary, Summary};

/// `12.3s`, `850ms`, `4m05s`, `2h10m`; negative for the past.
pub(crate) fn fmt_ms(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let a = ms.unsigned_abs();
    let body = if a < 1_000 {
        format!("{a}ms")
    } else if a < 60_000 {
        format!("{:.1}s", a as f64 / 1000.0)
    } else if a < 3_600_000 {
        format!("{}m{:02}s", a / 60_000, (a / 1000) % 60)
    } else {
        format!("{}h{:02}m", a / 3_600_000, (a / 60_000) % 60)
    };
    format!("{sign}{body}")
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Writes `rows` under `headers`, columns padded to their widest cell.
fn table(
    out: &mut dyn Write,
    indent: &str,
    headers: &[&str],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{indent}{}", padded.join("  ").trim_end())
    };
    writeln!(out, "{}", line(headers.to_vec()))?;
    for r in rows {
        writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

/// The summary as tables.
pub(crate) fn summary(out: &mut dyn Write, s: &Summary) -> std::io::Result<()> {
    writeln!(
        out,
        "valkey {}  namespace {}  keys {} ({} outside the schema)",
        s.valkey, s.namespace, s.keys, s.unknown_keys
    )?;
    if s.models.is_empty() {
        writeln!(out, "no models")?;
    }
    for m in &s.models {
        writeln!(out)?;
        model(out, m)?;
    }
    Ok(())
}

fn model(out: &mut dyn Write, m: &ModelSummary) -> std::io::Result<()> {
    let listed = if m.listed {
        ""
    } else {
        "  (NOT listed in the models set)"
    };
    writeln!(out, "model {}{listed}  seq {}", m.model, opt(m.seq))?;
    writeln!(out, "  workers: {}", m.workers.len())?;
    if !m.workers.is_empty() {
        let rows: Vec<Vec<String>> = m
            .workers
            .iter()
            .map(|w| {
                let flight = if w.in_flight.is_empty() {
                    "-".to_owned()
                } else {
                    let parts: Vec<String> = w
                        .in_flight
                        .iter()
                        .map(|(r, n)| format!("{r}={n}"))
                        .collect();
                    format!("{} ({} counted)", parts.join(","), w.in_flight_counted)
                };
                vec![
                    w.worker_id.clone(),
                    w.incarnation.to_string(),
                    w.status.to_owned(),
                    w.role.clone(),
                    w.lease_left_ms.map_or("-".into(), fmt_ms),
                    w.url.clone(),
                    w.blocks.to_string(),
                    w.speculative.to_string(),
                    opt(w.load.waiting),
                    opt(w.load.running),
                    w.load.kv_usage.map_or("-".into(), |k| format!("{k:.2}")),
                    w.load.age_ms.map_or("-".into(), fmt_ms),
                    w.heartbeat_age_ms.map_or("-".into(), fmt_ms),
                    flight,
                    if w.syncing { "yes" } else { "-" }.to_owned(),
                ]
            })
            .collect();
        let headers = [
            "ID",
            "INC",
            "STATUS",
            "ROLE",
            "LEASE",
            "URL",
            "BLOCKS",
            "SPEC",
            "WAITING",
            "RUNNING",
            "KV",
            "LOAD AGE",
            "HEARTBEAT",
            "IN FLIGHT",
            "SYNCING",
        ];
        table(out, "    ", &headers, &rows)?;
    }
    writeln!(out, "  routers: {}", m.routers.len())?;
    if !m.routers.is_empty() {
        let rows: Vec<Vec<String>> = m
            .routers
            .iter()
            .map(|r| {
                vec![
                    r.router_id.clone(),
                    fmt_ms(r.lease_left_ms),
                    if r.live { "live" } else { "expired" }.to_owned(),
                    r.in_flight.to_string(),
                ]
            })
            .collect();
        table(out, "    ", &["ID", "LEASE", "STATUS", "IN FLIGHT"], &rows)?;
    }
    let f = &m.forward;
    writeln!(
        out,
        "  forward map: {} buckets, {} hashes, {} entries",
        f.buckets, f.hashes, f.entries
    )?;
    let p = &m.purge;
    let list: Vec<String> = p.incarnations.iter().map(u64::to_string).collect();
    writeln!(
        out,
        "  purge backlog: {} incarnations [{}], {} entries left",
        p.incarnations.len(),
        list.join(" "),
        p.entries_left
    )?;
    writeln!(
        out,
        "  syncs in progress: {}  (staged, uncommitted: {})",
        m.syncs.len(),
        m.staged_syncs
    )?;
    if !m.syncs.is_empty() {
        let rows: Vec<Vec<String>> = m
            .syncs
            .iter()
            .map(|s| {
                vec![
                    s.worker_id.clone(),
                    s.incarnation.to_string(),
                    s.phase.clone(),
                    s.cursor.clone(),
                    s.target.to_string(),
                    s.idle_ms.map_or("-".into(), fmt_ms),
                ]
            })
            .collect();
        table(
            out,
            "    ",
            &["ID", "INC", "PHASE", "CURSOR", "TARGET", "IDLE"],
            &rows,
        )?;
    }
    if !m.gc.is_empty() {
        let parts: Vec<String> = m.gc.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "  gc sweep at: {}", parts.join(", "))?;
    }
    Ok(())
}

/// The check report: each violation shown, then the counts.
pub(crate) fn check(out: &mut dyn Write, r: &CheckReport) -> std::io::Result<()> {
    writeln!(
        out,
        "checked valkey {}  namespace {}",
        r.valkey, r.namespace
    )?;
    for v in &r.shown {
        let model = v
            .model
            .as_deref()
            .map(|m| format!("model {m}: "))
            .unwrap_or_default();
        writeln!(
            out,
            "VIOLATION [{} {}] {model}{}: {}",
            v.invariant,
            v.code.name(),
            v.subject,
            v.detail
        )?;
    }
    let hidden = r.violations.saturating_sub(r.shown.len() as u64);
    if hidden > 0 {
        writeln!(out, "... and {hidden} more (--show N prints more)")?;
    }
    if !r.by_code.is_empty() {
        let codes: Vec<String> = r
            .by_code
            .iter()
            .map(|(c, n)| format!("{} {}: {n}", c.invariant(), c.name()))
            .collect();
        writeln!(out, "by code: {}", codes.join(", "))?;
    }
    if r.unverified > 0 {
        writeln!(
            out,
            "{} suspected violations beyond the first {} were not re-checked; they count as violations",
            r.unverified,
            super::check::MAX_CANDIDATES
        )?;
    }
    if r.transient > 0 {
        writeln!(
            out,
            "{} suspected violations were gone on the atomic re-check after {} ms (concurrent changes)",
            r.transient, r.recheck_delay_ms
        )?;
    }
    let s = &r.stats;
    writeln!(
        out,
        "read {} models, {} keys, {} incarnations, {} forward hashes, {} entries, {} reverse and {} speculative members",
        s.models,
        s.keys,
        s.incarnations,
        s.forward_fields,
        s.entries,
        s.reverse_members,
        s.speculative_members
    )?;
    if r.clean {
        writeln!(out, "OK: no violations")
    } else {
        writeln!(out, "FAILED: {} violations", r.violations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_ms(850), "850ms");
        assert_eq!(fmt_ms(12_345), "12.3s");
        assert_eq!(fmt_ms(-4_100), "-4.1s");
        assert_eq!(fmt_ms(245_000), "4m05s");
        assert_eq!(fmt_ms(7_800_000), "2h10m");
    }
}
