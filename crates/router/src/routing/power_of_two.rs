//! [`PowerOfTwo`]: the less loaded of two workers drawn at random (a baseline).

use rand::seq::index::sample;

use super::{Candidate, Policy, RouteRequest, ranked_by};

/// Draws two workers at random and prefers the less loaded one; the rest
/// follow by load, as retry order.
#[derive(Debug, Clone, Copy, Default)]
pub struct PowerOfTwo;

impl Policy for PowerOfTwo {
    fn name(&self) -> &'static str {
        "power_of_two"
    }

    fn rank(&self, _request: &RouteRequest, candidates: &[Candidate]) -> Vec<usize> {
        let by_load = ranked_by(candidates, |c| c.load());
        if candidates.len() < 2 {
            return by_load;
        }
        let pair = sample(&mut rand::rng(), candidates.len(), 2);
        let (a, b) = (pair.index(0), pair.index(1));
        let first = if candidates[b].load() < candidates[a].load() {
            b
        } else {
            a
        };
        let mut order = vec![first];
        order.extend(by_load.into_iter().filter(|&i| i != first));
        order
    }
}

#[cfg(test)]
mod tests {
    use super::super::cand;
    use super::*;

    #[test]
    fn never_picks_the_most_loaded_of_two() {
        let c = vec![cand("busy", 0, 9), cand("free", 0, 0)];
        let r = RouteRequest {
            prompt_tokens: 1,
            prefix_key: 0,
        };
        for _ in 0..50 {
            let order = PowerOfTwo.rank(&r, &c);
            assert_eq!(order, vec![1, 0]);
        }
    }
}
