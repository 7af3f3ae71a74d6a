//! How the prefill worker of a disaggregated request is chosen
//! (`--pd-prefill-policy`): by locality against queued prefill (the
//! cache-aware step over the prefill workers), or by load alone, the
//! baseline that shows what locality is worth.

use super::{Candidate, Policy, RouteRequest, ranked_by};

/// The prefill pick of disaggregated serving.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PrefillPolicy {
    /// Matched prefix against the prefill queued on each worker.
    #[default]
    CacheAware,
    /// The least queued prefill, blind to caches ([`LeastPrefill`]).
    LeastLoaded,
}

impl PrefillPolicy {
    /// Its name, as `--pd-prefill-policy` spells it.
    pub fn name(self) -> &'static str {
        match self {
            PrefillPolicy::CacheAware => "cache_aware",
            PrefillPolicy::LeastLoaded => "least_loaded",
        }
    }
}

impl std::str::FromStr for PrefillPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cache_aware" => Ok(PrefillPolicy::CacheAware),
            "least_loaded" => Ok(PrefillPolicy::LeastLoaded),
            _ => Err(format!(
                "unknown prefill policy {s:?}: expected cache_aware or least_loaded"
            )),
        }
    }
}

/// Ranks prefill workers by the prompt tokens queued on them to prefill,
/// then by requests in flight: what a prefill worker's next request waits
/// for, with its cache ignored.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastPrefill;

impl Policy for LeastPrefill {
    fn name(&self) -> &'static str {
        "least_loaded"
    }

    fn rank(&self, _request: &RouteRequest, candidates: &[Candidate]) -> Vec<usize> {
        ranked_by(candidates, |c| (c.prefill_tokens, c.load()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{cand, req};
    use super::*;

    #[test]
    fn the_least_queued_prefill_wins_whatever_it_holds() {
        let mut holder = cand("holder", 4096, 1);
        holder.prefill_tokens = 3000;
        let mut idle = cand("idle", 0, 1);
        idle.prefill_tokens = 100;
        let busier = cand("busier", 0, 2);
        let c = vec![holder, idle, busier];
        assert_eq!(LeastPrefill.rank(&req(4096), &c), vec![2, 1, 0]);
    }

    #[test]
    fn names_parse_back() {
        for p in [PrefillPolicy::CacheAware, PrefillPolicy::LeastLoaded] {
            assert_eq!(p.name().parse::<PrefillPolicy>(), Ok(p));
        }
        assert!("round_robin".parse::<PrefillPolicy>().is_err());
    }
}
