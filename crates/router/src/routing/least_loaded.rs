//! [`LeastLoaded`]: fewest requests ahead, blind to caches (a baseline).

use super::{Candidate, Policy, RouteRequest, ranked_by};

/// Ranks by load only; what load balancers without cache awareness do.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastLoaded;

impl Policy for LeastLoaded {
    fn name(&self) -> &'static str {
        "least_loaded"
    }

    fn rank(&self, _request: &RouteRequest, candidates: &[Candidate]) -> Vec<usize> {
        ranked_by(candidates, |c| (c.load(), c.kv_usage))
    }
}

#[cfg(test)]
mod tests {
    use super::super::cand;
    use super::*;

    #[test]
    fn fewest_requests_first() {
        let c = vec![cand("a", 9999, 3), cand("b", 0, 1), cand("c", 0, 2)];
        let r = RouteRequest {
            prompt_tokens: 10,
            prefix_key: 0,
        };
        assert_eq!(LeastLoaded.rank(&r, &c), vec![1, 2, 0]);
    }
}
