//! HTTP header names the router, the simulated worker and the load test
//! agree on.

/// On every routed answer: the worker the router chose.
pub const WORKER_HEADER: &str = "x-prefix-router-worker";
/// On a disaggregated answer: the prefill worker that computed the prompt
/// (the answer itself is the decode worker's, [`WORKER_HEADER`]).
pub const PREFILL_WORKER_HEADER: &str = "x-prefix-router-prefill-worker";
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
