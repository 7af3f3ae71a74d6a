//! Whether an engine restarted between two `GET /metrics` scrapes.
//!
//! A restarted vLLM comes back with an empty prefix cache, but it publishes
//! no KV event until its first request: without another signal, a reporter
//! would keep the old cache in the fleet's index and the routers would send
//! prompts to a cold engine as if it were warm. The scrape tells: the
//! process start time (`process_start_time_seconds`, from the Prometheus
//! client's process collector) changes, or, where an engine does not export
//! it (multiprocess mode), a counter that only grows goes down
//! (`vllm:prompt_tokens_total`: an engine that has prefilled nothing holds
//! nothing, so a restart that matters always shows as a decrease until the
//! new engine has prefilled as much as the old one had).

use crate::vllm_metrics::parse_sample;

/// The process collector's start time, seconds since the epoch.
pub const START_TIME: &str = "process_start_time_seconds";
/// vLLM's prompt-token counter (summed over its label sets).
pub const PROMPT_TOKENS: &str = "vllm:prompt_tokens_total";

/// What one scrape says about the engine's identity.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineIncarnation {
    /// `process_start_time_seconds`, if exported.
    pub start_time: Option<f64>,
    /// Σ `vllm:prompt_tokens_total`, if exported.
    pub prompt_tokens: Option<f64>,
}

impl EngineIncarnation {
    /// Reads both signals from a text exposition; non-finite or negative
    /// samples are ignored.
    pub fn parse(text: &str) -> Self {
        let mut out = EngineIncarnation::default();
        for line in text.lines() {
            let Some(s) = parse_sample(line) else {
                continue;
            };
            if !(s.value.is_finite() && s.value >= 0.0) {
                continue;
            }
            match s.name.as_ref() {
                START_TIME => out.start_time = Some(s.value),
                PROMPT_TOKENS => {
                    out.prompt_tokens = Some(out.prompt_tokens.unwrap_or(0.0) + s.value)
                }
                _ => {}
            }
        }
        out
    }

    /// Whether this scrape comes from a later process than `earlier`:
    /// another start time when both have one, else fewer prompt tokens.
    pub fn restarted_since(&self, earlier: &EngineIncarnation) -> bool {
        match (self.start_time, earlier.start_time) {
            (Some(now), Some(then)) => now != then,
            _ => matches!(
                (self.prompt_tokens, earlier.prompt_tokens),
                (Some(now), Some(then)) if now < then
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# HELP process_start_time_seconds Start time\n\
        # TYPE process_start_time_seconds gauge\n\
        process_start_time_seconds 1.7641e+09\n\
        vllm:prompt_tokens_total{engine=\"0\",model_name=\"qwen3\"} 1200.0\n\
        vllm:prompt_tokens_total{engine=\"1\",model_name=\"qwen3\"} 300.0\n";

    #[test]
    fn reads_the_start_time_and_sums_the_counter() {
        let i = EngineIncarnation::parse(PAGE);
        assert_eq!(i.start_time, Some(1.7641e9));
        assert_eq!(i.prompt_tokens, Some(1500.0));
        assert_eq!(
            EngineIncarnation::parse("garbage\n{"),
            EngineIncarnation::default()
        );
    }

    #[test]
    fn a_new_start_time_or_a_smaller_counter_is_a_restart() {
        let then = EngineIncarnation::parse(PAGE);
        let later = EngineIncarnation {
            prompt_tokens: Some(9000.0),
            ..then
        };
        assert!(!later.restarted_since(&then), "same process, more tokens");
        let reborn = EngineIncarnation {
            start_time: Some(1.7642e9),
            prompt_tokens: Some(9000.0),
        };
        assert!(reborn.restarted_since(&then));
        // Without start times the counter decides.
        let no_start = |t| EngineIncarnation {
            start_time: None,
            prompt_tokens: Some(t),
        };
        assert!(no_start(10.0).restarted_since(&no_start(1500.0)));
        assert!(!no_start(1500.0).restarted_since(&no_start(1500.0)));
        // Nothing known: never a restart.
        assert!(!EngineIncarnation::default().restarted_since(&then));
    }
}
