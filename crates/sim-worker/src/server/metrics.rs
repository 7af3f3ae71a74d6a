//! vLLM's load reports, from the simulated engine: `/metrics` in the
//! Prometheus text format with vLLM's names and labels, and the ORCA
//! `endpoint-load-metrics` response header (formats in
//! `shared/vllm/README.md`).

use std::fmt::Write;

use crate::{CacheStats, EngineCounters, Gauges};
use protocol::WorkerRole;

use super::core::ServeStats;

/// What `/metrics` shows.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// The load gauges.
    pub gauges: Gauges,
    /// The engine's totals.
    pub counters: EngineCounters,
    /// The server's totals.
    pub stats: ServeStats,
    /// The block pool.
    pub cache: CacheStats,
    /// The worker's prefill/decode role.
    pub role: WorkerRole,
}

/// The vLLM metrics of `sample` in the Prometheus text format, labelled
/// `model_name` and `engine="0"` like vLLM's.
pub fn render(model: &str, sample: &Sample) -> String {
    let labels = format!("model_name=\"{}\",engine=\"0\"", escape_label(model));
    let mut out = String::with_capacity(2048);
    let g = &sample.gauges;
    let c = &sample.counters;
    let gauges: [(&str, &str, f64); 3] = [
        (
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            g.num_requests_running as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            g.num_requests_waiting as f64,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            g.kv_cache_usage_perc,
        ),
    ];
    for (name, help, value) in gauges {
        metric(&mut out, name, help, "gauge", &labels, value);
    }
    let counters: [(&str, &str, u64); 5] = [
        (
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            c.prompt_tokens,
        ),
        (
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            sample.stats.generation_tokens,
        ),
        (
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            c.prompt_tokens,
        ),
        (
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            c.cached_tokens,
        ),
        (
            "sim:evicted_blocks",
            "Cached blocks evicted to make room (simulation only).",
            sample.cache.evictions,
        ),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name}_total {help}");
        let _ = writeln!(out, "# TYPE {name}_total counter");
        let _ = writeln!(out, "{name}_total{{{labels}}} {}", py_float(value as f64));
    }
    let _ = writeln!(
        out,
        "# HELP vllm:request_success_total Count of successfully processed requests."
    );
    let _ = writeln!(out, "# TYPE vllm:request_success_total counter");
    let _ = writeln!(
        out,
        "vllm:request_success_total{{{labels},finished_reason=\"length\"}} {}",
        py_float(sample.stats.completed as f64)
    );
    metric(
        &mut out,
        "sim:cached_blocks",
        "Blocks holding a cached hash (simulation only).",
        "gauge",
        &labels,
        sample.cache.cached_blocks as f64,
    );
    disagg_metrics(&mut out, &labels, sample);
    out
}

/// The role's and the CPU tier's series, only where they exist: a `both`
/// worker without a CPU tier shows exactly what it always did.
fn disagg_metrics(out: &mut String, labels: &str, sample: &Sample) {
    let c = &sample.counters;
    let mut counters: Vec<(&str, &str, u64)> = Vec::new();
    if sample.role != WorkerRole::Both {
        let role = format!("{labels},role=\"{}\"", sample.role);
        metric(
            out,
            "sim:role_info",
            "The worker's prefill/decode role (simulation only).",
            "gauge",
            &role,
            1.0,
        );
        counters.extend([
            (
                "sim:prefill_handoffs",
                "Prefills answered with kv_transfer_params for a remote decode (simulation only).",
                sample.stats.handoffs,
            ),
            (
                "sim:remote_prefills",
                "Requests whose prompt KV was pulled from a remote prefill (simulation only).",
                c.remote_prefills,
            ),
            (
                "sim:remote_prefill_tokens",
                "Prompt tokens whose KV was pulled from remote prefills (simulation only).",
                c.remote_tokens,
            ),
        ]);
    }
    let cache = &sample.cache;
    if cache.cpu_capacity > 0 {
        metric(
            out,
            "sim:cpu_cached_blocks",
            "Blocks held by the CPU tier (simulation only).",
            "gauge",
            labels,
            cache.cpu_cached_blocks as f64,
        );
        counters.extend([
            (
                "sim:cpu_hit_tokens",
                "Prompt tokens loaded from the CPU tier instead of computed (simulation only).",
                c.cpu_hit_tokens,
            ),
            (
                "sim:cpu_hit_blocks",
                "Blocks loaded back from the CPU tier (simulation only).",
                cache.cpu_hit_blocks,
            ),
            (
                "sim:offloaded_blocks",
                "Blocks moved from the GPU pool to the CPU tier (simulation only).",
                cache.offloaded,
            ),
            (
                "sim:cpu_evicted_blocks",
                "Blocks the CPU tier evicted to make room (simulation only).",
                cache.cpu_evictions,
            ),
        ]);
    }
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP {name}_total {help}");
        let _ = writeln!(out, "# TYPE {name}_total counter");
        let _ = writeln!(out, "{name}_total{{{labels}}} {}", py_float(value as f64));
    }
}

fn metric(out: &mut String, name: &str, help: &str, kind: &str, labels: &str, value: f64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name}{{{labels}}} {}", py_float(value));
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The ORCA header value for the request header's `format` (`TEXT` or
/// `JSON`, any case), as vLLM's `create_orca_header` writes it; `None` for
/// any other format (vLLM then sends no header).
pub fn orca_header(format: &str, gauges: &Gauges) -> Option<String> {
    let waiting = py_float(gauges.num_requests_waiting as f64);
    let kv = py_float(gauges.kv_cache_usage_perc);
    match format.trim().to_ascii_uppercase().as_str() {
        "TEXT" => Some(format!(
            "TEXT named_metrics.num_requests_waiting={waiting}, named_metrics.kv_cache_usage_perc={kv}"
        )),
        "JSON" => Some(format!(
            "JSON {{\"named_metrics\": {{\"num_requests_waiting\": {waiting}, \"kv_cache_usage_perc\": {kv}}}}}"
        )),
        _ => None,
    }
}

/// Python's `repr(float)`: shortest round-trip digits, `.0` on integral
/// values, exponent form below 1e-4 and from 1e16 on (`1e-05`, `1e+16`).
pub fn py_float(x: f64) -> String {
    if !x.is_finite() {
        return match (x.is_nan(), x > 0.0) {
            (true, _) => "nan",
            (false, true) => "inf",
            (false, false) => "-inf",
        }
        .into();
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let point = exp + 1; // digits before the decimal point
    if !(-4 < point && point <= 16) {
        let (head, tail) = digits.split_at(1);
        let frac = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let e_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{head}{frac}e{e_sign}{:02}", exp.unsigned_abs());
    }
    if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = point as usize;
    if point < digits.len() {
        format!("{sign}{}.{}", &digits[..point], &digits[point..])
    } else {
        format!("{sign}{digits}{}.0", "0".repeat(point - digits.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        for (x, want) in [
            (3.0, "3.0"),
            (0.4, "0.4"),
            (0.0, "0.0"),
            (1.0 / 8192.0, "0.0001220703125"),
            (1.0 / 65536.0, "1.52587890625e-05"),
            (1e16, "1e+16"),
            (123456.75, "123456.75"),
            (-2.5, "-2.5"),
            (1e15, "1000000000000000.0"),
        ] {
            assert_eq!(py_float(x), want, "{x}");
        }
    }

    #[test]
    fn orca_headers_match_vllms_own() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/vllm/orca_header.json"
        );
        let vectors: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let gauges = Gauges {
            num_requests_running: 1,
            num_requests_waiting: 3,
            kv_cache_usage_perc: 0.4,
        };
        for (format, resp) in vectors["responses"].as_object().unwrap() {
            let want = resp
                .get(protocol::headers::ORCA_RESPONSE_HEADER)
                .and_then(|h| h.as_str());
            assert_eq!(orca_header(format, &gauges).as_deref(), want, "{format}");
        }
    }
}
