//! [`RoundRobin`]: each worker in turn (a baseline).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Candidate, Policy, RouteRequest};

/// Rotates through the workers in id order, per router.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }

    fn rank(&self, _request: &RouteRequest, candidates: &[Candidate]) -> Vec<usize> {
        let mut by_id: Vec<usize> = (0..candidates.len()).collect();
        by_id.sort_by(|&a, &b| candidates[a].worker_id.cmp(&candidates[b].worker_id));
        if by_id.is_empty() {
            return by_id;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % by_id.len();
        by_id.rotate_left(start);
        by_id
    }
}

#[cfg(test)]
mod tests {
    use super::super::cand;
    use super::*;

    #[test]
    fn takes_turns() {
        let p = RoundRobin::default();
        let c = vec![cand("b", 0, 0), cand("a", 0, 0)];
        let r = RouteRequest {
            prompt_tokens: 1,
            prefix_key: 0,
        };
        let firsts: Vec<usize> = (0..4).map(|_| p.rank(&r, &c)[0]).collect();
        assert_eq!(firsts, vec![1, 0, 1, 0]);
        assert!(p.rank(&r, &[]).is_empty());
    }
}
