//! HTTP header names the router, the simulated worker and the load test
//! agree on, and [`RESERVED`]: the ones only the router sets, removed from
//! every client request before it reaches a worker.

/// On every routed answer: the worker the router chose.
pub const WORKER_HEADER: &str = "x-prefix-router-worker";
/// On a disaggregated answer: the prefill worker that computed the prompt
/// (the answer itself is the decode worker's, [`WORKER_HEADER`]).
pub const PREFILL_WORKER_HEADER: &str = "x-prefix-router-prefill-worker";
/// On a request the endpoint picker sends to a disaggregated model's
/// decode worker: the prefill worker, `host:port`, for its sidecar
/// (llm-d's routing sidecar reads this name).
pub const PREFILLER_HEADER: &str = "x-prefiller-host-port";
/// On an answer the response cache was asked for: `hit` or `miss`.
pub const CACHE_HEADER: &str = "x-prefix-router-cache";
/// Set by the endpoint picker for the gateway: the chosen endpoints.
pub const DESTINATION_HEADER: &str = "x-gateway-destination-endpoint";

/// The headers only the router (or the endpoint picker) sets. A client's
/// own are removed from its request on every path (`serve`'s colocated
/// and disaggregated requests, every other forwarded route, the endpoint
/// picker's answer), so that no client can name a prefill host to a
/// decode worker's sidecar or pass for the router towards a worker.
pub const RESERVED: [&str; 5] = [
    WORKER_HEADER,
    PREFILL_WORKER_HEADER,
    PREFILLER_HEADER,
    CACHE_HEADER,
    DESTINATION_HEADER,
];

/// Whether `name` (any case) is one of the [`RESERVED`] headers.
pub fn is_reserved(name: &str) -> bool {
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name))
}

/// On a simulated worker's answers: its worker id.
pub const SIM_WORKER_HEADER: &str = "x-sim-worker";
/// On a simulated worker's answers: prompt tokens served from its cache
/// (its GPU pool and CPU tier; not KV pulled from a remote prefill).
pub const SIM_CACHED_TOKENS_HEADER: &str = "x-sim-cached-tokens";
/// On a simulated decode worker's answers to a remote prefill's request:
/// prompt tokens whose KV it pulled from the prefill worker.
pub const SIM_REMOTE_TOKENS_HEADER: &str = "x-sim-remote-tokens";
/// ORCA: the request header that asks vLLM for a load report.
pub const ORCA_REQUEST_HEADER: &str = "endpoint-load-metrics-format";
/// ORCA: the response header that carries it.
pub const ORCA_RESPONSE_HEADER: &str = "endpoint-load-metrics";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserved_headers_are_lower_case_and_matched_in_any_case() {
        for name in RESERVED {
            assert_eq!(name, name.to_ascii_lowercase());
            assert!(is_reserved(name) && is_reserved(&name.to_ascii_uppercase()));
        }
        assert!(!is_reserved(ORCA_REQUEST_HEADER));
        assert!(!is_reserved("via"));
    }
}
