//! [`TimeModel`]: how long a simulated request takes.
//!
//! These are one request's costs as if it had the GPU alone; how requests
//! share it is the engine's (`PrefillSharing`: by default prefills run one
//! after another, decodes never slow down). For a request with `uncached` prompt tokens to compute, `cached` prompt
//! tokens served from the prefix cache and `output` tokens to generate:
//!
//! ```text
//! prefill = scale × (request_overhead + uncached × prefill_per_token
//!                                     + cached × prefill_per_cached_token)
//! decode  = scale × (output − 1) × decode_per_token
//! ```
//!
//! The prefill's forward pass samples the first output token, so only the
//! remaining `output − 1` tokens cost a decode step each.

use std::time::Duration;

/// A time model that cannot be used: a scale that is not a positive finite
/// number.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("time scale must be a positive finite number, got {0}")]
pub struct TimeModelError(pub f64);

/// The simulated cost of prefill and decode. All durations are real-time
/// costs before [`time_scale`](Self::time_scale) is applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeModel {
    /// Prefill cost of each prompt token not served from the cache.
    pub prefill_per_token: Duration,
    /// Prefill cost of each prompt token served from the cache (small: the
    /// KV is reused, only attention over it remains).
    pub prefill_per_cached_token: Duration,
    /// Fixed cost of every request (scheduling, sampling, detokenizing).
    pub request_overhead: Duration,
    /// Cost of each output token after the first (one decode step).
    pub decode_per_token: Duration,
    /// Multiplies every duration: 0.1 runs ten times faster than real time,
    /// so that load tests finish quickly while keeping proportions.
    pub time_scale: f64,
}

impl Default for TimeModel {
    /// vLLM serving an 8B model in bf16 on one A100 80GB (estimated from
    /// its peaks, docs/sim-worker.md "What 1× means"): 10k prompt tokens/s
    /// of prefill, 50 output tokens/s per sequence, at real time.
    fn default() -> Self {
        TimeModel {
            prefill_per_token: Duration::from_micros(100),
            prefill_per_cached_token: Duration::from_micros(2),
            request_overhead: Duration::from_millis(5),
            decode_per_token: Duration::from_millis(20),
            time_scale: 1.0,
        }
    }
}

impl TimeModel {
    /// Checks that the scale is usable.
    pub fn validate(&self) -> Result<(), TimeModelError> {
        if self.time_scale.is_finite() && self.time_scale > 0.0 {
            Ok(())
        } else {
            Err(TimeModelError(self.time_scale))
        }
    }

    /// Scaled time from admission to the first token.
    pub fn prefill(&self, uncached_tokens: usize, cached_tokens: usize) -> Duration {
        let nanos = self
            .request_overhead
            .as_nanos()
            .saturating_add(per(self.prefill_per_token, uncached_tokens))
            .saturating_add(per(self.prefill_per_cached_token, cached_tokens));
        self.scaled(nanos)
    }

    /// Scaled time from the first token to the `index`-th output token
    /// (0-based; the 0th is the first token itself).
    pub fn decode(&self, index: usize) -> Duration {
        self.scaled(per(self.decode_per_token, index))
    }

    /// Scaled time from the first token to the last of `output_tokens`.
    pub fn decode_all(&self, output_tokens: usize) -> Duration {
        self.decode(output_tokens.saturating_sub(1))
    }

    /// Applies the scale to any real-time duration.
    pub fn scale(&self, real: Duration) -> Duration {
        self.scaled(real.as_nanos())
    }

    /// `nanos × scale`, rounded to the nanosecond, saturating at
    /// `u64::MAX` nanoseconds (about 584 years).
    fn scaled(&self, nanos: u128) -> Duration {
        let scaled = (nanos as f64 * self.time_scale).round();
        if scaled.is_nan() || scaled <= 0.0 {
            Duration::ZERO
        } else if scaled >= u64::MAX as f64 {
            Duration::from_nanos(u64::MAX)
        } else {
            Duration::from_nanos(scaled as u64)
        }
    }
}

/// `cost × count` in nanoseconds, saturating.
fn per(cost: Duration, count: usize) -> u128 {
    cost.as_nanos().saturating_mul(count as u128)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(scale: f64) -> TimeModel {
        TimeModel {
            prefill_per_token: Duration::from_micros(100),
            prefill_per_cached_token: Duration::from_micros(1),
            request_overhead: Duration::from_millis(3),
            decode_per_token: Duration::from_millis(10),
            time_scale: scale,
        }
    }

    #[test]
    fn prefill_is_affine_in_uncached_and_cached_tokens() {
        let m = model(1.0);
        let base = m.prefill(0, 0);
        assert_eq!(base, m.request_overhead);
        let per_uncached = m.prefill(1001, 0) - m.prefill(1000, 0);
        assert_eq!(per_uncached, m.prefill_per_token);
        assert_eq!(m.prefill(2000, 0) - base, (m.prefill(1000, 0) - base) * 2);
        let per_cached = m.prefill(0, 501) - m.prefill(0, 500);
        assert_eq!(per_cached, m.prefill_per_cached_token);
        assert!(m.prefill(100, 900) < m.prefill(1000, 0));
    }

    #[test]
    fn decode_counts_tokens_after_the_first() {
        let m = model(1.0);
        assert_eq!(m.decode_all(1), Duration::ZERO);
        assert_eq!(m.decode_all(0), Duration::ZERO);
        assert_eq!(m.decode_all(11), m.decode_per_token * 10);
        assert_eq!(m.decode(3), m.decode_per_token * 3);
    }

    #[test]
    fn scale_applies_to_every_duration() {
        let (real, fast) = (model(1.0), model(0.1));
        for (u, c) in [(0, 0), (1000, 0), (123, 4567), (7, 1)] {
            let (r, f) = (real.prefill(u, c), fast.prefill(u, c));
            assert_eq!(f.as_nanos(), (r.as_nanos() as f64 * 0.1).round() as u128);
        }
        assert_eq!(fast.decode_all(101), real.decode_all(101) / 10);
        assert_eq!(
            fast.scale(Duration::from_secs(5)),
            Duration::from_millis(500)
        );
        assert_eq!(model(2.0).prefill(10, 0), real.prefill(10, 0) * 2);
    }

    #[test]
    fn scale_is_validated_and_saturates() {
        assert!(model(0.5).validate().is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(model(bad).validate().is_err());
        }
        let huge = TimeModel {
            decode_per_token: Duration::MAX,
            ..model(1.0)
        };
        assert_eq!(huge.decode_all(usize::MAX), Duration::from_nanos(u64::MAX));
    }
}
