//! Bounded load: how many requests a worker may have and still be chosen
//! for affinity (consistent hashing with bounded loads, Mirrokni et al.).

use super::Candidate;

/// Requests a worker may always have on top of the proportional bound
/// (defined with the other defaults of the policy, in `state`).
pub use state::DEFAULT_LOAD_SLACK;

/// The most requests any worker may have, counting the one being placed,
/// to be chosen for affinity: ⌈(1 + ε) × (total load + 1) / workers⌉ + slack.
/// A prefix every request shares then spreads over the fleet instead of
/// collapsing onto the worker that first cached it.
pub fn capacity(candidates: &[Candidate], epsilon: f64, slack: u64) -> u64 {
    if candidates.is_empty() {
        return 0;
    }
    let total: u64 = candidates.iter().map(Candidate::load).sum();
    ((1.0 + epsilon) * (total + 1) as f64 / candidates.len() as f64).ceil() as u64 + slack
}

/// Whether `c` may take one more request under `capacity`.
pub fn within(c: &Candidate, capacity: u64) -> bool {
    c.load() < capacity
}

#[cfg(test)]
mod tests {
    use super::super::cand;
    use super::*;

    #[test]
    fn capacity_counts_the_request_being_placed() {
        // Idle fleet: everyone may take the request.
        let idle = vec![cand("a", 0, 0), cand("b", 0, 0)];
        assert_eq!(capacity(&idle, 0.25, 0), 1);
        assert!(idle.iter().all(|c| within(c, 1)));
        // 1 and 0 in flight: ⌈1.25 × 2 / 2⌉ = 2, so "a" may take a second one.
        let one = vec![cand("a", 0, 1), cand("b", 0, 0)];
        assert!(within(&one[0], capacity(&one, 0.25, 0)));
        // 6 and 0: ⌈1.25 × 7 / 2⌉ = 5, so "a" is over; with a slack of 2, 7.
        let hot = vec![cand("a", 0, 6), cand("b", 0, 0)];
        assert!(!within(&hot[0], capacity(&hot, 0.25, 0)));
        assert!(within(&hot[0], capacity(&hot, 0.25, 2)));
        // 1, 0, 0: the bare bound refuses "a"; the slack keeps its affinity.
        let three = vec![cand("a", 0, 1), cand("b", 0, 0), cand("c", 0, 0)];
        assert!(!within(&three[0], capacity(&three, 0.25, 0)));
        assert!(within(
            &three[0],
            capacity(&three, 0.25, DEFAULT_LOAD_SLACK)
        ));
    }
}
