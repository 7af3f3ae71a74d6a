//! [`Backoff`]: exponential delays between attempts, with jitter, so that a
//! fleet of workers coming back after an outage does not retry in lockstep.

use std::time::Duration;

use rand::Rng;

/// Delays between attempts: `initial`, doubling up to `max`, each with up
/// to 25% random jitter subtracted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Default for Backoff {
    /// 100 ms doubling up to 5 s (a full-sync period).
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempt` (0 = the first retry).
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .initial
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max);
        let jitter = rand::rng().random_range(0.0..0.25);
        base.mul_f64(1.0 - jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_max_with_bounded_jitter() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        for (attempt, nominal) in [
            (0, 100),
            (1, 200),
            (2, 400),
            (3, 800),
            (4, 1000),
            (40, 1000),
        ] {
            let d = b.delay(attempt).as_millis() as u64;
            assert!(d <= nominal && d >= nominal * 3 / 4, "{attempt}: {d}");
        }
    }
}
