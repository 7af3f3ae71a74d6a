//! The prefill/decode comparison's table (`loadtest pd`): per arm, latency
//! (TTFT, and time per output token, which P/D is meant to protect), TTFT
//! of a chat's first turns against its later ones, each role's own cache
//! hit rate, and how the routers served disaggregated requests.

use super::table::{markdown, ms, opt};
use crate::runner::ArmResult;
use crate::topology::FleetCounters;

fn pct(v: Option<f64>) -> String {
    opt(v, |h| format!("{:.1}%", 100.0 * h))
}

/// The hit rate the sims of `role` counted, `–` without such sims.
fn role_hit(c: Option<&FleetCounters>, role: &str) -> String {
    pct(c
        .and_then(|c| c.roles.iter().find(|r| r.role == role))
        .and_then(|r| r.hit_rate()))
}

/// One row per arm; see the module docs.
pub fn pd_table(arms: &[ArmResult]) -> String {
    let header = [
        "arm",
        "requests",
        "failed",
        "TTFT p50 ms",
        "TTFT p99",
        "TPOT p50 ms",
        "TPOT p99",
        "first turns TTFT p50",
        "later turns TTFT p50",
        "later turns TTFT p99",
        "hit rate (answers)",
        "prefill workers' hit rate",
        "decode workers' hit rate",
        "colocated workers' hit rate",
        "prefill skipped",
        "decode alone",
    ];
    let rows: Vec<Vec<String>> = arms
        .iter()
        .map(|a| {
            let s = &a.summary;
            let c = a.counters.as_ref();
            let paths = |path: &str| {
                let total: u64 = c.map_or(0, |c| c.pd_paths.values().sum());
                let n = c.and_then(|c| c.pd_paths.get(path).copied()).unwrap_or(0);
                pct((total > 0).then(|| n as f64 / total as f64))
            };
            let turns = a.by_turn.as_ref();
            vec![
                a.label.clone(),
                s.requests.to_string(),
                s.failed.to_string(),
                opt(s.ttft_ms, |p| ms(p.p50)),
                opt(s.ttft_ms, |p| ms(p.p99)),
                opt(s.tpot_ms, |p| ms(p.p50)),
                opt(s.tpot_ms, |p| ms(p.p99)),
                opt(turns.and_then(|t| t.first.ttft_ms), |p| ms(p.p50)),
                opt(turns.and_then(|t| t.later.ttft_ms), |p| ms(p.p50)),
                opt(turns.and_then(|t| t.later.ttft_ms), |p| ms(p.p99)),
                pct(s.hit_rate),
                role_hit(c, "prefill"),
                role_hit(c, "decode"),
                role_hit(c, "both"),
                paths("skip_prefill"),
                paths("decode_only"),
            ]
        })
        .collect();
    markdown(&header, &rows)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::table::tests::arm;
    use super::*;
    use crate::topology::RoleCounters;

    #[test]
    fn roles_and_paths_fill_their_columns() {
        let mut pd = arm("pd");
        pd.counters = Some(FleetCounters {
            roles: vec![
                RoleCounters {
                    role: "prefill".into(),
                    prompt_tokens: 1000,
                    cached_tokens: 250,
                    ..RoleCounters::default()
                },
                RoleCounters {
                    role: "decode".into(),
                    prompt_tokens: 1000,
                    cached_tokens: 900,
                    ..RoleCounters::default()
                },
            ],
            pd_paths: BTreeMap::from([
                ("skip_prefill".to_owned(), 1),
                ("disaggregated".to_owned(), 3),
            ]),
            migrations: BTreeMap::new(),
        });
        let t = pd_table(&[arm("colocated"), pd]);
        let rows: Vec<&str> = t.lines().skip(2).collect();
        assert!(rows[0].starts_with("| colocated |"), "{t}");
        assert!(
            rows[1].ends_with("| 25.0% | 90.0% | – | 25.0% | 0.0% |"),
            "{t}"
        );
    }
}
