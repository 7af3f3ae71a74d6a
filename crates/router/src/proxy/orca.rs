//! Worker load from vLLM's ORCA response header (`endpoint-load-metrics`),
//! which vLLM sends on non-streamed responses when the request asks for it
//! (`protocol::headers::ORCA_REQUEST_HEADER`).

use protocol::headers::ORCA_RESPONSE_HEADER;
use state::StateStore;

/// Load a worker reported in one response.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OrcaLoad {
    /// Requests queued (summed over data-parallel engines).
    pub num_requests_waiting: Option<f64>,
    /// KV cache usage, 0 to 1 (the fullest engine).
    pub kv_cache_usage_perc: Option<f64>,
}

/// Parses `TEXT named_metrics.k=v, ...` or `JSON {"named_metrics": {...}}`.
/// With several engines TEXT repeats keys: queues add up, KV usage takes the
/// maximum. Anything else is `None`.
pub fn parse(header: &str) -> Option<OrcaLoad> {
    let mut load = OrcaLoad::default();
    let mut ok = true;
    let mut add = |key: &str, value: f64| match key {
        _ if !(value.is_finite() && value >= 0.0) => ok = false,
        "num_requests_waiting" => *load.num_requests_waiting.get_or_insert(0.0) += value,
        "kv_cache_usage_perc" => {
            let kv = load.kv_cache_usage_perc.get_or_insert(0.0);
            *kv = kv.max(value);
        }
        _ => {}
    };
    if let Some(text) = header.strip_prefix("TEXT ") {
        for entry in text.split(',') {
            let (key, value) = entry.trim().split_once('=')?;
            add(
                key.strip_prefix("named_metrics.")?,
                value.trim().parse().ok()?,
            );
        }
    } else if let Some(json) = header.strip_prefix("JSON ") {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        for (key, value) in v.get("named_metrics")?.as_object()? {
            add(key, value.as_f64()?);
        }
    } else {
        return None;
    }
    ok.then_some(load)
}

/// Records the load a worker reported in its response, if it did, off the
/// request path.
pub fn record_load(store: &StateStore, model: &str, worker: &str, resp: &reqwest::Response) {
    let Some(load) = resp
        .headers()
        .get(ORCA_RESPONSE_HEADER)
        .and_then(|h| h.to_str().ok())
        .and_then(parse)
    else {
        return;
    };
    let (store, model, worker) = (store.clone(), model.to_owned(), worker.to_owned());
    tokio::spawn(async move {
        let waiting = load.num_requests_waiting.map(|w| w.round() as u64);
        if let Err(e) = store
            .report_load(&model, &worker, waiting, None, load.kv_cache_usage_perc)
            .await
        {
            tracing::debug!(error = %e, "ORCA load not recorded");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllms_own_headers_parse() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/vllm/orca_header.json"
        );
        let vectors: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut checked = 0;
        for (format, resp) in vectors["responses"].as_object().unwrap() {
            let Some(h) = resp
                .get(protocol::headers::ORCA_RESPONSE_HEADER)
                .and_then(|h| h.as_str())
            else {
                continue;
            };
            let load = parse(h).unwrap_or_else(|| panic!("{format}: {h}"));
            assert_eq!(load.num_requests_waiting, Some(3.0));
            assert_eq!(load.kv_cache_usage_perc, Some(0.4));
            checked += 1;
        }
        assert_eq!(checked, 4);
    }

    #[test]
    fn data_parallel_engines_and_garbage() {
        let h = "TEXT named_metrics.num_requests_waiting=2.0, named_metrics.kv_cache_usage_perc=0.3, named_metrics.num_requests_waiting=5.0, named_metrics.kv_cache_usage_perc=0.7";
        assert_eq!(
            parse(h),
            Some(OrcaLoad {
                num_requests_waiting: Some(7.0),
                kv_cache_usage_perc: Some(0.7)
            })
        );
        for bad in [
            "",
            "PROTO x",
            "TEXT nonsense",
            "TEXT named_metrics.kv_cache_usage_perc=-1",
            "JSON {",
            "TEXT named_metrics.x=nan",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
