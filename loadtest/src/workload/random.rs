//! Seeded randomness that every run reproduces exactly: a SplitMix64
//! generator (the trace's token runs are derived from block ids with it),
//! exponential inter-arrival times (Poisson arrivals) and a Zipf sampler
//! (document popularity).

use std::time::Duration;

/// SplitMix64: tiny, fast, and the same on every platform and version,
/// which matters because it defines the prompts.
#[derive(Debug, Clone)]
pub struct Rng64(u64);

impl Rng64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: unbiased enough for workload generation.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// An exponential sample of mean `mean`: the gap between Poisson arrivals.
pub fn exp_sample(rng: &mut Rng64, mean: Duration) -> Duration {
    let u = 1.0 - rng.unit(); // (0, 1]
    mean.mul_f64(-u.ln())
}

/// Zipf over `0..n`: P(k) ∝ 1 / (k + 1)^s, sampled by inverting the CDF.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n` (> 0) items with exponent `s` (≥ 0).
    pub fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut total = 0.0;
        for k in 0..n.max(1) {
            total += 1.0 / ((k + 1) as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    /// A sample in `0..n`.
    pub fn sample(&self, rng: &mut Rng64) -> usize {
        let u = rng.unit();
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_reproducible_and_bounded() {
        let a: Vec<u64> = (0..5).map(|_| Rng64::new(7).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut r = Rng64::new(1);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn exponential_mean_is_close() {
        let mut r = Rng64::new(3);
        let n = 20_000;
        let total: f64 = (0..n)
            .map(|_| exp_sample(&mut r, Duration::from_millis(100)).as_secs_f64())
            .sum();
        let mean = total / n as f64;
        assert!((mean - 0.1).abs() < 0.005, "{mean}");
    }

    #[test]
    fn zipf_prefers_the_head() {
        let z = Zipf::new(100, 1.1);
        let mut r = Rng64::new(5);
        let mut counts = [0usize; 100];
        for _ in 0..20_000 {
            counts[z.sample(&mut r)] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[10]);
        assert!(counts[0] > 20_000 / 10);
        let uniform = Zipf::new(4, 0.0);
        let mut c = [0usize; 4];
        for _ in 0..8000 {
            c[uniform.sample(&mut r)] += 1;
        }
        assert!(c.iter().all(|&x| x > 1700), "{c:?}");
    }
}
