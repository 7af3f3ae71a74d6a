//! Saturation seen from routing's candidates: a worker is past its limits
//! when it reaches any configured threshold; a model is saturated when
//! every live worker is (the same rule as `flow_dispatch.lua`).

use crate::routing::Candidate;
use state::SaturationThresholds;

/// Which thresholds `c` has reached (empty: it may take more).
pub fn past(t: &SaturationThresholds, c: &Candidate) -> Vec<&'static str> {
    let mut out = Vec::new();
    if t.max_in_flight > 0 && c.in_flight >= t.max_in_flight {
        out.push("in_flight");
    }
    // Stale reports were zeroed with the candidate (as routing ignores them).
    if t.waiting.is_some_and(|w| c.waiting >= w) {
        out.push("waiting");
    }
    if t.kv_usage.is_some_and(|k| c.kv_usage >= k) {
        out.push("kv_usage");
    }
    if t.prefill_tokens.is_some_and(|p| c.prefill_tokens >= p) {
        out.push("prefill_tokens");
    }
    out
}

/// What `candidates` leave free, in one pass: whether every one is past a
/// threshold (none: not saturated, there is nothing to wait for), and the
/// places the others have left by `flow_dispatch.lua`'s rule (below the
/// most in flight, one each without that limit). A worker past no
/// threshold always has a place, so saturated is "some, and none free".
pub fn view<'a>(
    t: &SaturationThresholds,
    candidates: impl Iterator<Item = &'a Candidate>,
) -> (bool, u64) {
    let (mut any, mut free) = (false, 0u64);
    for c in candidates {
        any = true;
        if past(t, c).is_empty() {
            free += match t.max_in_flight {
                0 => 1,
                most => most.saturating_sub(c.in_flight),
            };
        }
    }
    (any && free == 0, free)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn t() -> SaturationThresholds {
        SaturationThresholds {
            max_in_flight: 4,
            waiting: Some(2),
            kv_usage: Some(0.9),
            prefill_tokens: None,
            stale_load: Duration::from_secs(10),
        }
    }

    fn c(in_flight: u64, waiting: u64, kv: f64) -> Candidate {
        Candidate {
            in_flight,
            waiting,
            kv_usage: kv,
            ..Candidate::default()
        }
    }

    #[test]
    fn saturated_only_when_every_worker_is_past_a_threshold() {
        let t = t();
        assert!(!view(&t, [].iter()).0);
        assert!(!view(&t, [c(4, 0, 0.0), c(3, 1, 0.5)].iter()).0);
        assert!(view(&t, [c(4, 0, 0.0), c(0, 2, 0.0), c(0, 0, 0.95)].iter()).0);
        assert_eq!(
            past(&t, &c(5, 3, 1.0)),
            ["in_flight", "waiting", "kv_usage"]
        );
    }

    #[test]
    fn free_places_count_what_the_workers_past_no_threshold_have_left() {
        let t = t();
        assert_eq!(view(&t, [].iter()), (false, 0));
        // 4 - 1, and a worker past its waiting threshold adds nothing.
        assert_eq!(view(&t, [c(1, 0, 0.0), c(0, 2, 0.0)].iter()), (false, 3));
        let one_each = SaturationThresholds {
            max_in_flight: 0,
            ..t
        };
        assert_eq!(
            view(&one_each, [c(9, 0, 0.0), c(9, 0, 0.5)].iter()),
            (false, 2)
        );
    }
}
