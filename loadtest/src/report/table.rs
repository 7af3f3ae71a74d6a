//! The report's Markdown tables: the main comparison (one row per arm),
//! the answers under a fault, the minutes around its event, and failures
//! by kind (CPU use: `cpu_table`).

use crate::runner::ArmResult;

/// Milliseconds, to 0.1 ms below 100 ms.
pub(super) fn ms(v: f64) -> String {
    if v.abs() < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

pub(super) fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "–".into())
}

/// A Markdown table from a header and rows.
pub fn markdown(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out.push('|');
    for (i, _) in header.iter().enumerate() {
        out.push_str(if i == 0 { "---|" } else { "---:|" });
    }
    out.push('\n');
    for r in rows {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    out
}

/// Around the scenario's event: per arm, the hit rate, TTFT p50 and
/// failures of the requests sent in the minute before it and the minute
/// after it. Empty when no arm had an event.
pub fn around_table(arms: &[ArmResult]) -> String {
    let rows: Vec<Vec<String>> = arms
        .iter()
        .filter_map(|a| {
            let e = a.around.as_ref()?;
            let hit =
                |s: &crate::metrics::Summary| opt(s.hit_rate, |h| format!("{:.1}%", 100.0 * h));
            let ttft = |s: &crate::metrics::Summary| opt(s.ttft_ms, |p| ms(p.p50));
            let delta = match (e.before.hit_rate, e.after.hit_rate) {
                (Some(b), Some(a)) => format!("{:+.1}", 100.0 * (a - b)),
                _ => "–".into(),
            };
            Some(vec![
                a.label.clone(),
                format!("{:.0} s", e.span_s),
                format!("{} / {}", e.before.requests, e.before.failed),
                hit(&e.before),
                ttft(&e.before),
                format!("{} / {}", e.after.requests, e.after.failed),
                hit(&e.after),
                ttft(&e.after),
                delta,
            ])
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    markdown(
        &[
            "policy",
            "each side",
            "before: requests / failed",
            "hit rate",
            "TTFT p50 ms",
            "after: requests / failed",
            "hit rate",
            "TTFT p50 ms",
            "hit rate change (points)",
        ],
        &rows,
    )
}

/// Answers under a fault: per arm with an event, the requests, those
/// failed, those truncated (a stream that began and ended incomplete), the
/// routers' migrations by outcome (`prefix_router_migrations_total`, over
/// the run), and the answers touched by a stopped worker
/// ([`twins`](crate::twins)): how many equal their fault-free twin, their
/// end-to-end times beside the others'. Empty when no arm had an event.
pub fn answers_table(arms: &[ArmResult]) -> String {
    let rows: Vec<Vec<String>> = arms
        .iter()
        .filter(|a| a.event.is_some())
        .map(|a| {
            let moves = |outcome: &str| {
                opt(a.counters.as_ref(), |c| {
                    c.migrations.get(outcome).copied().unwrap_or(0).to_string()
                })
            };
            let e2e = |v: Option<(f64, f64)>| {
                v.map_or_else(|| "–".into(), |(p50, max)| format!("{p50:.0} / {max:.0}"))
            };
            let t = a.twins.as_ref();
            vec![
                a.label.clone(),
                a.summary.requests.to_string(),
                a.summary.failed.to_string(),
                a.summary.truncated.to_string(),
                moves("migrated"),
                moves("not_migrated"),
                moves("failed"),
                opt(t, |t| format!("{} of {}", t.equal, t.touched)),
                e2e(t.and_then(|t| t.touched_e2e_ms)),
                e2e(t.and_then(|t| t.others_e2e_ms)),
            ]
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    markdown(
        &[
            "policy",
            "requests",
            "failed",
            "truncated",
            "migrated",
            "not migrated",
            "moves failed",
            "twin-equal",
            "E2E p50 / max ms, touched",
            "E2E p50 / max ms, others",
        ],
        &rows,
    )
}

/// The main table: rows = arms, columns = the measures.
pub fn main_table(arms: &[ArmResult]) -> String {
    let header = [
        "policy",
        "routers",
        "requests",
        "failed",
        "hit rate",
        "TTFT p50 ms",
        "TTFT p90",
        "TTFT p99",
        "E2E p50 ms",
        "E2E p90",
        "E2E p99",
        "req/s",
        "tok/s",
        "imbalance",
        "overhead p50 ms",
        "overhead p99",
    ];
    let rows: Vec<Vec<String>> = arms
        .iter()
        .map(|a| {
            let s = &a.summary;
            vec![
                a.label.clone(),
                // 0: a --target fleet, whose routers are not counted.
                if a.routers == 0 {
                    "–".into()
                } else {
                    a.routers.to_string()
                },
                s.requests.to_string(),
                s.failed.to_string(),
                opt(s.hit_rate, |h| format!("{:.1}%", 100.0 * h)),
                opt(s.ttft_ms, |p| ms(p.p50)),
                opt(s.ttft_ms, |p| ms(p.p90)),
                opt(s.ttft_ms, |p| ms(p.p99)),
                opt(s.e2e_ms, |p| ms(p.p50)),
                opt(s.e2e_ms, |p| ms(p.p90)),
                opt(s.e2e_ms, |p| ms(p.p99)),
                format!("{:.2}", s.req_per_s),
                format!("{:.0}", s.tokens_per_s),
                opt(s.imbalance, |i| format!("{i:.2}")),
                opt(a.overhead, |o| format!("{:+.2}", o.p50_ms())),
                opt(a.overhead, |o| format!("{:+.2}", o.p99_ms())),
            ]
        })
        .collect();
    markdown(&header, &rows)
}

/// Failures by kind, one line per arm that had any.
pub fn failures(arms: &[ArmResult]) -> String {
    let mut out = String::new();
    for a in arms {
        if a.summary.errors.is_empty() {
            continue;
        }
        let kinds: Vec<String> = a
            .summary
            .errors
            .iter()
            .map(|(k, n)| format!("{n} × {k}"))
            .collect();
        out.push_str(&format!("* {}: {}\n", a.label, kinds.join(", ")));
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::metrics::{Sample, summarize};

    pub(crate) fn arm(label: &str) -> ArmResult {
        let samples = vec![Sample {
            start_s: 0.0,
            end_s: 1.0,
            error: None,
            ttft_ms: Some(12.34),
            e2e_ms: 250.0,
            prompt_tokens: 100,
            cached_tokens: Some(25),
            completion_tokens: 4,
            worker: Some("sim-0".into()),
            turn: 0,
        }];
        ArmResult {
            label: label.into(),
            routers: 2,
            summary: summarize(&samples, &["sim-0".into(), "sim-1".into()]),
            windows: vec![],
            overhead: None,
            event: None,
            around: None,
            cpu: None,
            decision_p50_ms: None,
            log_dir: None,
            counters: None,
            by_turn: None,
            twins: None,
        }
    }

    #[test]
    fn main_table_has_a_row_per_arm() {
        let t = main_table(&[arm("cache_aware ×2"), arm("round_robin ×2")]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("| policy | routers |"));
        assert!(lines[1].starts_with("|---|---:|---:|"));
        assert!(lines[2].contains("| 25.0% |"));
        assert!(lines[2].contains("| 12.3 |"));
        assert!(lines[2].contains("| 250 |"));
        assert!(lines[2].contains("| 2.00 |")); // imbalance: 100 vs mean 50
        assert!(lines[2].ends_with("| – | – |"));
        assert_eq!(failures(&[arm("x")]), "");
    }

    #[test]
    fn answers_under_a_fault_count_truncations_and_moves() {
        assert_eq!(answers_table(&[arm("x")]), "", "no event, no table");
        let mut a = arm("cache_aware ×2");
        let cut = |error: &str| Sample {
            error: Some(error.into()),
            ..a_sample()
        };
        let samples = vec![
            a_sample(),
            cut("stream cut: connection reset"),
            cut("stream ended without a finish_reason"),
            cut("stream ended by an error event: the worker failed mid-answer"),
            cut("HTTP 502"),
        ];
        a.summary = summarize(&samples, &[]);
        a.event = Some(crate::runner::EventMark {
            at_s: 10.0,
            what: "SIGKILL sim-0".into(),
        });
        let mut counters = crate::topology::FleetCounters::default();
        counters.migrations.insert("migrated".into(), 5);
        a.counters = Some(counters);
        let t = answers_table(&[a.clone()]);
        let row = t.lines().nth(2).unwrap();
        assert_eq!(
            row, "| cache_aware ×2 | 5 | 4 | 3 | 5 | 0 | 0 | – | – | – |",
            "{t}"
        );
        a.twins = Some(crate::twins::TwinCheck {
            touched: 3,
            equal: 2,
            differing: vec!["…".into()],
            touched_e2e_ms: Some((812.4, 1500.0)),
            others_e2e_ms: Some((640.0, 1201.0)),
        });
        let t = answers_table(&[a]);
        let row = t.lines().nth(2).unwrap();
        assert!(row.ends_with("| 2 of 3 | 812 / 1500 | 640 / 1201 |"), "{t}");
    }

    fn a_sample() -> Sample {
        Sample {
            start_s: 0.0,
            end_s: 1.0,
            error: None,
            ttft_ms: Some(1.0),
            e2e_ms: 2.0,
            prompt_tokens: 10,
            cached_tokens: None,
            completion_tokens: 2,
            worker: None,
            turn: 0,
        }
    }
}
