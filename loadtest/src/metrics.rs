//! From per-request samples to the report's measures: hit rate as the
//! workers report it, latency percentiles, throughput, load imbalance,
//! failures, and the same over time windows.

use std::collections::BTreeMap;

use serde::Serialize;

/// One request as measured (times in seconds from the start of the run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// When it was sent.
    pub start_s: f64,
    /// When its answer ended (or it failed).
    pub end_s: f64,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Time to first content chunk, milliseconds (streamed only).
    pub ttft_ms: Option<f64>,
    /// End to end, milliseconds.
    pub e2e_ms: f64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Prompt tokens the worker served from its cache, if it said.
    pub cached_tokens: Option<u64>,
    /// Output tokens.
    pub completion_tokens: u64,
    /// The worker that served it.
    pub worker: Option<String>,
    /// Its turn in its session (0: the first; later chat turns resend the
    /// earlier ones).
    pub turn: usize,
}

impl Sample {
    /// Whether it succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    /// Time per output token after the first, milliseconds: streamed
    /// answers of two tokens or more.
    pub fn tpot_ms(&self) -> Option<f64> {
        let ttft = self.ttft_ms?;
        (self.completion_tokens > 1)
            .then(|| (self.e2e_ms - ttft) / (self.completion_tokens - 1) as f64)
    }
}

/// p50, p90 and p99 of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values` (NaNs ignored); `None` if empty.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Percentiles> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Percentiles {
            p50: nearest_rank(&v, 0.50),
            p90: nearest_rank(&v, 0.90),
            p99: nearest_rank(&v, 0.99),
        })
    }
}

/// The smallest value with at least `q` of the values at or below it.
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// The measures of one run of one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Requests sent.
    pub requests: usize,
    /// Non-2xx answers, transport errors, cut streams.
    pub failed: usize,
    /// Of the failed, streams that began and ended incomplete: cut, or
    /// without a `finish_reason` or `[DONE]` ([`truncation`]).
    pub truncated: usize,
    /// Failures by kind (the message's first words).
    pub errors: BTreeMap<String, usize>,
    /// Σ cached prompt tokens / Σ prompt tokens, over successful requests.
    pub hit_rate: Option<f64>,
    /// Time to first token, milliseconds.
    pub ttft_ms: Option<Percentiles>,
    /// End to end, milliseconds.
    pub e2e_ms: Option<Percentiles>,
    /// Time per output token after the first, milliseconds.
    pub tpot_ms: Option<Percentiles>,
    /// Successful requests per second of the run.
    pub req_per_s: f64,
    /// (Prompt + output) tokens of successful requests per second.
    pub tokens_per_s: f64,
    /// Max / mean prompt tokens per worker.
    pub imbalance: Option<f64>,
    /// From the first send to the last answer, seconds.
    pub duration_s: f64,
    /// Prompt tokens per worker.
    pub per_worker_tokens: BTreeMap<String, u64>,
}

/// Whether a failure is an answer that began and ended incomplete: the
/// stream was cut, ended by an error event, or ended without `[DONE]` or a
/// `finish_reason`.
pub fn truncation(error: &str) -> bool {
    error.starts_with("stream cut") || error.starts_with("stream ended")
}

/// Summarizes `samples`; `workers` are the fleet's worker ids (a worker
/// that served nothing counts in the imbalance), or empty to use those seen.
pub fn summarize(samples: &[Sample], workers: &[String]) -> Summary {
    let ok: Vec<&Sample> = samples.iter().filter(|s| s.ok()).collect();
    let duration_s = samples.iter().map(|s| s.end_s).fold(0.0, f64::max);
    let mut errors = BTreeMap::new();
    for s in samples {
        if let Some(e) = &s.error {
            *errors.entry(error_kind(e)).or_insert(0) += 1;
        }
    }
    let with_cache: Vec<&&Sample> = ok.iter().filter(|s| s.cached_tokens.is_some()).collect();
    let prompt: u64 = with_cache.iter().map(|s| s.prompt_tokens).sum();
    let cached: u64 = with_cache.iter().filter_map(|s| s.cached_tokens).sum();
    let mut per_worker: BTreeMap<String, u64> = workers.iter().map(|w| (w.clone(), 0)).collect();
    for s in &ok {
        if let Some(w) = &s.worker {
            *per_worker.entry(w.clone()).or_insert(0) += s.prompt_tokens;
        }
    }
    let tokens: u64 = ok
        .iter()
        .map(|s| s.prompt_tokens + s.completion_tokens)
        .sum();
    let per_s = |x: f64| {
        if duration_s > 0.0 {
            x / duration_s
        } else {
            0.0
        }
    };
    Summary {
        requests: samples.len(),
        failed: samples.len() - ok.len(),
        truncated: samples
            .iter()
            .filter(|s| s.error.as_deref().is_some_and(truncation))
            .count(),
        errors,
        hit_rate: (prompt > 0).then(|| cached as f64 / prompt as f64),
        ttft_ms: Percentiles::of(ok.iter().filter_map(|s| s.ttft_ms)),
        e2e_ms: Percentiles::of(ok.iter().map(|s| s.e2e_ms)),
        tpot_ms: Percentiles::of(ok.iter().filter_map(|s| s.tpot_ms())),
        req_per_s: per_s(ok.len() as f64),
        tokens_per_s: per_s(tokens as f64),
        imbalance: imbalance(per_worker.values().copied()),
        duration_s,
        per_worker_tokens: per_worker,
    }
}

/// Max / mean of per-worker loads; `None` without load.
pub fn imbalance(loads: impl IntoIterator<Item = u64>) -> Option<f64> {
    let v: Vec<u64> = loads.into_iter().collect();
    let total: u64 = v.iter().sum();
    if v.is_empty() || total == 0 {
        return None;
    }
    let mean = total as f64 / v.len() as f64;
    Some(*v.iter().max()? as f64 / mean)
}

/// A failure's kind: `HTTP 502`, `transport`, `stream cut`, `timeout`, ….
fn error_kind(e: &str) -> String {
    if let Some(rest) = e.strip_prefix("stream ended by an error event: ") {
        return format!("error event: {}", rest.split(':').next().unwrap_or(rest));
    }
    if let Some(rest) = e.strip_prefix("HTTP ") {
        return format!("HTTP {}", rest.split(':').next().unwrap_or(rest));
    }
    e.split(':').next().unwrap_or(e).to_owned()
}

/// A multi-turn workload's measures split by turn: sessions' first turns
/// against their later ones (which resend the earlier turns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ByTurn {
    /// First turns.
    pub first: Summary,
    /// Every later turn.
    pub later: Summary,
}

/// `samples` split by turn; `None` when no session has a second turn.
pub fn by_turn(samples: &[Sample]) -> Option<ByTurn> {
    let (first, later): (Vec<Sample>, Vec<Sample>) =
        samples.iter().cloned().partition(|s| s.turn == 0);
    (!later.is_empty()).then(|| ByTurn {
        first: summarize(&first, &[]),
        later: summarize(&later, &[]),
    })
}

/// The measures of one time window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Its start, seconds from the start of the run.
    pub start_s: f64,
    /// Requests sent in it.
    pub requests: usize,
    /// Of which failed.
    pub failed: usize,
    /// Hit rate of the successful ones.
    pub hit_rate: Option<f64>,
    /// Median time to first token, milliseconds.
    pub ttft_p50_ms: Option<f64>,
}

/// The measures just before and just after a scenario's event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AroundEvent {
    /// Width of each side, seconds.
    pub span_s: f64,
    /// Requests sent in `[at - span, at)`.
    pub before: Summary,
    /// Requests sent in `[at, at + span)`.
    pub after: Summary,
}

/// The requests sent in the `span_s` seconds before `at_s` and in the
/// `span_s` seconds from it, each side summarized.
pub fn around(samples: &[Sample], at_s: f64, span_s: f64) -> AroundEvent {
    let side = |lo: f64, hi: f64| {
        let owned: Vec<Sample> = samples
            .iter()
            .filter(|s| s.start_s >= lo && s.start_s < hi)
            .cloned()
            .collect();
        summarize(&owned, &[])
    };
    AroundEvent {
        span_s,
        before: side(at_s - span_s, at_s),
        after: side(at_s, at_s + span_s),
    }
}

/// `samples` bucketed by send time into windows of `width_s` seconds.
pub fn windows(samples: &[Sample], width_s: f64) -> Vec<Window> {
    if samples.is_empty() || width_s <= 0.0 {
        return Vec::new();
    }
    let last = samples.iter().map(|s| s.start_s).fold(0.0, f64::max);
    let n = (last / width_s).floor() as usize + 1;
    let mut buckets: Vec<Vec<&Sample>> = vec![Vec::new(); n];
    for s in samples {
        let i = ((s.start_s / width_s).floor().max(0.0) as usize).min(n - 1);
        buckets[i].push(s);
    }
    buckets
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let owned: Vec<Sample> = b.into_iter().cloned().collect();
            let s = summarize(&owned, &[]);
            Window {
                start_s: i as f64 * width_s,
                requests: s.requests,
                failed: s.failed,
                hit_rate: s.hit_rate,
                ttft_p50_ms: s.ttft_ms.map(|p| p.p50),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(start: f64, worker: &str, prompt: u64, cached: u64, ttft: f64) -> Sample {
        Sample {
            start_s: start,
            end_s: start + 1.0,
            error: None,
            ttft_ms: Some(ttft),
            e2e_ms: ttft * 2.0,
            prompt_tokens: prompt,
            cached_tokens: Some(cached),
            completion_tokens: 10,
            worker: Some(worker.into()),
            turn: 0,
        }
    }

    #[test]
    fn around_splits_at_the_event() {
        let s = vec![
            sample(5.0, "a", 100, 10, 5.0),  // out of span
            sample(50.0, "a", 100, 80, 5.0), // before
            sample(69.9, "a", 100, 60, 5.0), // before
            sample(70.0, "b", 100, 0, 5.0),  // after
            sample(129.0, "b", 100, 50, 5.0),
            sample(130.0, "b", 100, 100, 5.0), // out of span
        ];
        let a = around(&s, 70.0, 60.0);
        assert_eq!((a.before.requests, a.after.requests), (2, 2));
        assert_eq!(a.before.hit_rate, Some(0.7));
        assert_eq!(a.after.hit_rate, Some(0.25));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of((1..=100).map(f64::from)).unwrap();
        assert_eq!((p.p50, p.p90, p.p99), (50.0, 90.0, 99.0));
        let one = Percentiles::of([7.0]).unwrap();
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
        assert!(Percentiles::of([]).is_none());
        assert_eq!(nearest_rank(&[1.0, 2.0], 0.0), 1.0);
    }

    #[test]
    fn summary_measures() {
        let mut s = vec![
            sample(0.0, "a", 100, 50, 10.0),
            sample(1.0, "a", 100, 100, 20.0),
            sample(2.0, "b", 200, 0, 30.0),
        ];
        s.push(Sample {
            error: Some("HTTP 502: bad gateway".into()),
            cached_tokens: None,
            ..sample(3.0, "b", 999, 0, 1.0)
        });
        s.push(Sample {
            error: Some("transport: refused".into()),
            ..sample(3.5, "b", 999, 0, 1.0)
        });
        let workers = ["a".to_owned(), "b".into(), "c".into()];
        let m = summarize(&s, &workers);
        assert_eq!((m.requests, m.failed), (5, 2));
        assert_eq!(m.errors["HTTP 502"], 1);
        assert_eq!(m.errors["transport"], 1);
        assert_eq!(m.hit_rate, Some(150.0 / 400.0));
        assert_eq!(m.ttft_ms.unwrap().p50, 20.0);
        // (2 × ttft - ttft) / 9 tokens after the first.
        assert_eq!(m.tpot_ms.unwrap().p50, 20.0 / 9.0);
        assert_eq!(m.duration_s, 4.5);
        assert!((m.req_per_s - 3.0 / 4.5).abs() < 1e-9);
        assert!((m.tokens_per_s - 430.0 / 4.5).abs() < 1e-9);
        // a: 200, b: 200, c: 0 → max 200 / mean 133.3
        assert!((m.imbalance.unwrap() - 1.5).abs() < 1e-9);
        assert_eq!(imbalance([]), None);
        assert_eq!(imbalance([0, 0]), None);
    }

    #[test]
    fn later_turns_apart() {
        let mut s = vec![
            sample(0.0, "a", 100, 0, 50.0),
            sample(1.0, "a", 200, 100, 10.0),
        ];
        assert!(by_turn(&s).is_none());
        s[1].turn = 1;
        let t = by_turn(&s).unwrap();
        assert_eq!((t.first.requests, t.later.requests), (1, 1));
        assert_eq!(t.later.ttft_ms.unwrap().p50, 10.0);
        assert_eq!(t.later.hit_rate, Some(0.5));
    }

    #[test]
    fn windows_bucket_by_send_time() {
        let s = vec![
            sample(0.5, "a", 100, 0, 10.0),
            sample(4.9, "a", 100, 100, 30.0),
            sample(12.0, "a", 100, 50, 50.0),
        ];
        let w = windows(&s, 5.0);
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].requests, 2);
        assert_eq!(w[0].hit_rate, Some(0.5));
        assert_eq!(w[0].ttft_p50_ms, Some(10.0));
        assert_eq!(w[1].requests, 0);
        assert_eq!(w[1].hit_rate, None);
        assert_eq!(w[2].start_s, 10.0);
        assert!(windows(&[], 5.0).is_empty());
    }
}
