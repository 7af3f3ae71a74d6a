//! The floor under `loadtest overload`'s first target: the TTFT p99 of the
//! highest-priority class that an ideal fleet-wide scheduler would give at
//! half and at twice the capacity, so that a measured ratio can be read
//! against what no router could beat.
//!
//! The model: `workers` engines whose prefills are serial and last
//! `workers / capacity` seconds each (the sims with `--prefill serial` and
//! one prompt length); Poisson arrivals split into the classes by share; a
//! worker takes the next request the instant its prefill ends, the highest
//! priority first, first come first served within a class; a prefill once
//! started runs to its end (an engine cannot stop one for a later arrival
//! either); a sheddable class (negative priority) is served only when a
//! worker is idle and nothing waits, else refused, as flow control does.
//! No dispatch delay, no decode: it is a floor, not a forecast.
//! `docs/results/2026-11-28-overload/journal.md` ("The floor") compares it
//! with the runs.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::parts::{Part, top_class};
use crate::metrics::nearest_rank;

/// Requests simulated per phase and seed.
const REQUESTS: usize = 20_000;
/// Seeds per phase; the figures are their medians.
const SEEDS: u64 = 3;

/// The ideal scheduler's TTFT p99 of the highest-priority class, in
/// seconds, at half and at twice the capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    pub half_p99: f64,
    pub over_p99: f64,
}

impl Floor {
    /// The p99 at 2x over the p99 at half load.
    pub fn ratio(&self) -> f64 {
        self.over_p99 / self.half_p99
    }
}

/// The floor for `classes` (priority in `number`) on `workers` serving
/// `capacity` requests per second in all; `None` without a class that may
/// wait (priority >= 0) or without workers.
pub fn floor(classes: &[Part], workers: usize, capacity: f64) -> Option<Floor> {
    let top = top_class(classes)?;
    if workers == 0 || capacity.is_nan() || capacity <= 0.0 {
        return None;
    }
    let p99 = |rate: f64| {
        let mut runs: Vec<f64> = (1..=SEEDS)
            .map(|seed| top_p99(classes, top, workers, capacity, rate, seed))
            .collect();
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    };
    Some(Floor {
        half_p99: p99(capacity * 0.5),
        over_p99: p99(capacity * 2.0),
    })
}

/// One run at `rate`: the TTFT p99 of class `top`.
fn top_p99(
    classes: &[Part],
    top: usize,
    workers: usize,
    capacity: f64,
    rate: f64,
    seed: u64,
) -> f64 {
    let prefill = workers as f64 / capacity;
    let total: f64 = classes.iter().map(|c| c.share).sum();
    // Queues in priority order, highest first.
    let mut order: Vec<usize> = (0..classes.len()).collect();
    order.sort_by(|a, b| classes[*b].number.total_cmp(&classes[*a].number));
    let mut queues: Vec<VecDeque<f64>> = vec![VecDeque::new(); classes.len()];
    let mut free_at = vec![0.0f64; workers];
    let mut ttft = Vec::new();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut now = 0.0;
    // Starts the best waiting request on worker `k` at `at`.
    let mut start = |k: usize, at: f64, queues: &mut Vec<VecDeque<f64>>, free_at: &mut [f64]| {
        for &c in &order {
            if let Some(arrived) = queues[c].pop_front() {
                free_at[k] = at + prefill;
                if c == top {
                    ttft.push(free_at[k] - arrived);
                }
                return true;
            }
        }
        false
    };
    for _ in 0..REQUESTS {
        now += -(1.0 - rng.random::<f64>()).ln() / rate;
        // Workers that finished before `now` take what waits, in order.
        loop {
            let (k, f) = earliest(&free_at);
            if f > now || !start(k, f, &mut queues, &mut free_at) {
                break;
            }
        }
        let mut u = rng.random::<f64>() * total;
        let class = classes
            .iter()
            .position(|c| {
                u -= c.share;
                u < 0.0
            })
            .unwrap_or(classes.len() - 1);
        let (k, f) = earliest(&free_at);
        let nothing_waits = queues.iter().all(VecDeque::is_empty);
        if classes[class].number < 0.0 {
            // Sheddable: served only by an idle worker.
            if f <= now && nothing_waits {
                free_at[k] = now + prefill;
            }
            continue;
        }
        queues[class].push_back(now);
        if f <= now && nothing_waits {
            start(k, now, &mut queues, &mut free_at);
        }
    }
    // What still waits is served in order.
    loop {
        let (k, f) = earliest(&free_at);
        if !start(k, f, &mut queues, &mut free_at) {
            break;
        }
    }
    ttft.sort_by(f64::total_cmp);
    if ttft.is_empty() {
        return f64::NAN;
    }
    // The same p99 as the measured side's.
    nearest_rank(&ttft, 0.99)
}

/// The worker that frees first, and when.
fn earliest(free_at: &[f64]) -> (usize, f64) {
    free_at
        .iter()
        .copied()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, f64::INFINITY))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(interactive: f64) -> Vec<Part> {
        let part = |name: &str, number: f64, share: f64| Part {
            name: name.into(),
            number,
            share,
        };
        vec![
            part("interactive", 10.0, interactive),
            part("standard", 0.0, 0.7 - interactive),
            part("batch", -1.0, 0.3),
        ]
    }

    #[test]
    fn a_lone_request_takes_one_prefill() {
        // At a trickle nothing queues: every TTFT is the prefill, 0.2 s.
        let f = top_p99(&classes(0.1), 0, 2, 10.0, 0.01, 1);
        assert!((f - 0.2).abs() < 1e-9, "{f}");
    }

    #[test]
    fn the_floor_rises_with_the_top_class_share() {
        // With a small interactive share the class hardly feels the
        // overload; with 30% it alone is 60% of the capacity at 2x, and
        // even an ideal scheduler nearly doubles its p99.
        let small = floor(&classes(0.1), 2, 10.0).unwrap();
        let large = floor(&classes(0.3), 2, 10.0).unwrap();
        assert!(small.ratio() < 1.35, "{small:?}");
        assert!(large.ratio() > 1.6, "{large:?}");
        // Never below one prefill.
        assert!(small.half_p99 >= 0.2 && large.half_p99 >= 0.2);
    }

    #[test]
    fn no_floor_without_a_class_that_waits() {
        let only_batch = vec![Part {
            name: "batch".into(),
            number: -1.0,
            share: 1.0,
        }];
        assert_eq!(floor(&only_batch, 2, 10.0), None);
        assert_eq!(floor(&classes(0.1), 0, 10.0), None);
    }
}
