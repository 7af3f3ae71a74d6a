//! Flow control's flags ([`FlowArgs`], flattened into `serve`'s) and their
//! resolution over the file's keys and the defaults: when a model's
//! workers count as saturated, and the waiting room's bounds.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};

use protocol::parse_duration;

use super::FlowSettings;
use super::file::file_duration;
use state::SaturationThresholds;

/// Requests that may wait per model in each router by default.
const DEFAULT_MAX_QUEUED: usize = 1024;
/// Longest wait by default.
const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(30);

/// Flags of `serve` about flow control (flattened into
/// [`super::ServeArgs`]). Flow control is on when any saturation threshold
/// is set.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct FlowArgs {
    /// A worker is saturated at this many requests in flight, counted over
    /// every router; while every worker of a model is saturated, requests
    /// wait in the routers [default: no limit].
    #[arg(long, env = "PREFIX_ROUTER_MAX_IN_FLIGHT_PER_WORKER")]
    pub max_in_flight_per_worker: Option<u64>,
    /// A worker is saturated when it reports this many requests waiting in
    /// its own queue [default: off].
    #[arg(long, env = "PREFIX_ROUTER_SATURATION_WAITING")]
    pub saturation_waiting: Option<u64>,
    /// A worker is saturated when it reports this KV cache usage, 0 to 1
    /// [default: off].
    #[arg(long, env = "PREFIX_ROUTER_SATURATION_KV_USAGE")]
    pub saturation_kv_usage: Option<f64>,
    /// A worker is saturated when this many prompt tokens routed to it are
    /// not yet past their first token [default: off].
    #[arg(long, env = "PREFIX_ROUTER_SATURATION_PREFILL_TOKENS")]
    pub saturation_prefill_tokens: Option<u64>,
    /// Requests of one model that may wait in this router while its
    /// workers are saturated; past it the lowest priority is shed
    /// [default: 1024].
    #[arg(long, env = "PREFIX_ROUTER_MAX_QUEUED")]
    pub max_queued: Option<usize>,
    /// Longest wait in the router; then the request gets a 503
    /// `queue_timeout` [default: 30s].
    #[arg(long, env = "PREFIX_ROUTER_QUEUE_TIMEOUT", value_parser = parse_duration)]
    pub queue_timeout: Option<Duration>,
    /// The longest wait of one priority, `PRIORITY=DURATION` (repeatable),
    /// over --queue-timeout: a lower band given a shorter wait is shed
    /// first when the workers stay saturated.
    #[arg(
        long = "band-queue-timeout",
        env = "PREFIX_ROUTER_BAND_QUEUE_TIMEOUTS",
        value_delimiter = ','
    )]
    pub band_queue_timeouts: Vec<String>,
}

/// The file's flow control keys (top level of the TOML file).
#[derive(Debug, Default)]
pub(super) struct FileKeys {
    pub(super) max_in_flight_per_worker: Option<u64>,
    pub(super) saturation_waiting: Option<u64>,
    pub(super) saturation_kv_usage: Option<f64>,
    pub(super) saturation_prefill_tokens: Option<u64>,
    pub(super) max_queued: Option<usize>,
    pub(super) queue_timeout: Option<String>,
    pub(super) band_queue_timeouts: BTreeMap<String, String>,
}

/// Flow control's settings: flags over the file over the defaults; `None`
/// (off) without any saturation threshold. `stale_load` is routing's.
pub(super) fn resolve(
    args: &FlowArgs,
    file: FileKeys,
    stale_load: Duration,
) -> anyhow::Result<Option<FlowSettings>> {
    let max_in_flight = args
        .max_in_flight_per_worker
        .or(file.max_in_flight_per_worker);
    if max_in_flight == Some(0) {
        bail!("--max-in-flight-per-worker must be positive (leave it unset for no limit)");
    }
    let kv_usage = args.saturation_kv_usage.or(file.saturation_kv_usage);
    if let Some(kv) = kv_usage
        && !(kv > 0.0 && kv <= 1.0)
    {
        bail!("--saturation-kv-usage {kv}: expected a fraction above 0, at most 1");
    }
    let thresholds = SaturationThresholds {
        max_in_flight: max_in_flight.unwrap_or(0),
        waiting: args.saturation_waiting.or(file.saturation_waiting),
        kv_usage,
        prefill_tokens: args
            .saturation_prefill_tokens
            .or(file.saturation_prefill_tokens),
        stale_load,
    };
    let max_queued = args
        .max_queued
        .or(file.max_queued)
        .unwrap_or(DEFAULT_MAX_QUEUED);
    let queue_timeout = args
        .queue_timeout
        .or(file_duration(file.queue_timeout, "queue_timeout")?)
        .unwrap_or(DEFAULT_QUEUE_TIMEOUT);
    if queue_timeout.is_zero() {
        bail!("--queue-timeout must be positive");
    }
    let mut band_timeouts = BTreeMap::new();
    for (p, d) in file.band_queue_timeouts {
        band_timeouts.insert(priority(&p)?, duration(&d, &p)?);
    }
    for spec in &args.band_queue_timeouts {
        let (p, d) = spec.split_once('=').with_context(|| {
            format!("--band-queue-timeout {spec:?}: expected PRIORITY=DURATION")
        })?;
        band_timeouts.insert(priority(p)?, duration(d, p)?);
    }
    let on = max_in_flight.is_some()
        || thresholds.waiting.is_some()
        || kv_usage.is_some()
        || thresholds.prefill_tokens.is_some();
    Ok(on.then_some(FlowSettings {
        thresholds,
        max_queued,
        queue_timeout,
        band_timeouts,
    }))
}

fn priority(p: &str) -> anyhow::Result<i32> {
    p.trim()
        .parse()
        .with_context(|| format!("band queue timeout: priority {p:?} is not an integer"))
}

fn duration(d: &str, p: &str) -> anyhow::Result<Duration> {
    let d = parse_duration(d.trim())
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("band queue timeout of priority {p}"))?;
    if d.is_zero() {
        bail!("band queue timeout of priority {p} must be positive");
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(args: FlowArgs, file: FileKeys) -> anyhow::Result<Option<FlowSettings>> {
        resolve(&args, file, Duration::from_secs(10))
    }

    #[test]
    fn off_without_a_threshold_and_on_with_one() {
        assert!(
            resolved(FlowArgs::default(), FileKeys::default())
                .unwrap()
                .is_none()
        );
        let s = resolved(
            FlowArgs {
                max_in_flight_per_worker: Some(4),
                ..FlowArgs::default()
            },
            FileKeys {
                max_queued: Some(7),
                queue_timeout: Some("2s".into()),
                band_queue_timeouts: [("-1".to_owned(), "500ms".to_owned())].into(),
                ..FileKeys::default()
            },
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.thresholds.max_in_flight, 4);
        assert_eq!(s.max_queued, 7);
        assert_eq!(s.queue_timeout, Duration::from_secs(2));
        assert_eq!(s.timeout_of(-1), Duration::from_millis(500));
        assert_eq!(s.timeout_of(3), Duration::from_secs(2));
    }

    #[test]
    fn bad_values_are_refused_at_start() {
        let bad = [
            FlowArgs {
                max_in_flight_per_worker: Some(0),
                ..FlowArgs::default()
            },
            FlowArgs {
                saturation_kv_usage: Some(1.5),
                ..FlowArgs::default()
            },
            FlowArgs {
                saturation_waiting: Some(1),
                queue_timeout: Some(Duration::ZERO),
                ..FlowArgs::default()
            },
            FlowArgs {
                saturation_waiting: Some(1),
                band_queue_timeouts: vec!["high=1s".into()],
                ..FlowArgs::default()
            },
        ];
        for args in bad {
            assert!(
                resolved(args.clone(), FileKeys::default()).is_err(),
                "{args:?}"
            );
        }
    }
}
