//! Load tests of a prefix-router fleet.
//!
//! `loadtest run` starts a fleet on 127.0.0.1 ([`topology`]: Valkey, router
//! replicas behind an L4 balancer, sim-workers), sends a [`workload`]
//! through it ([`drive`]), applies a [`scenario`]'s fault in the middle, and
//! writes a [`report`] comparing routing policies on the same workload.
//! See `docs/loadtest.md`.
//!
//! Layout (processes, Valkey and HAProxy come from the `fleet` crate; the
//! router is run, never linked):
//!
//! * [`cli`]: the flags of `loadtest run` and its subcommands.
//! * [`run`]: one run: arms, scenarios, the report's files.
//! * [`ramp`]: the fleet's capacity per policy: the workload at rising
//!   load factors until TTFT p99 or failures pass a bound.
//! * [`capacity`]: runs at rising rates per prompt size; CPU per request
//!   and requests per core of Valkey and the routers.
//! * [`overload`]: classes and tenants at half and twice the fleet's
//!   capacity, flow control off and on (`loadtest overload`).
//! * [`pd`]: prefill/decode disaggregation against colocated workers
//!   (`loadtest pd`): the P/D arms, each role's counters, `pd.md`.
//! * [`runner`]: drives one arm's fleet through a workload and a scenario.
//! * [`topology`]: one arm's fleet of routers, sims, Valkey and a balancer
//!   (named apart from the `fleet` crate, which starts its processes).
//! * [`workload`]: synthetic, random, text and trace workloads.
//! * [`drive`]: sends a workload's requests at their times.
//! * [`client`]: one OpenAI request and what its answer says.
//! * [`scenario`]: the fault applied in the middle of a run.
//! * [`twins`]: the answers a fault touched, against their fault-free
//!   twins, and the latency it added.
//! * [`metrics`]: hit rate, TTFT, imbalance and CPU per request.
//! * [`report`]: tables, markdown and plots.
//! * [`peers`]: other routers in the same seat: vllm-router (kv_aware or
//!   cache_aware), SMG with its mesh, Dynamo's selection service behind our
//!   frontend (`loadtest dynamo-frontend`), sglang-router.
//! * [`calibrate`]: the sim's time model against a target.
//! * [`machine`]: what the machine is, for the report.
//! * [`real_engine`]: the fleet in front of real vLLM CPU engines.
//! * [`rate_limit`]: tenants' fleet-wide rate limits per minute across 4
//!   routers (`loadtest rate-limit`).
//!
//! Within: `ramp`, `capacity`, `pd`, `real_engine`, `rate_limit` → `run` → `runner` → `topology`, `drive` → `client`;
//! `report` reads `metrics`.

#![warn(missing_docs)]

pub mod calibrate;
pub mod capacity;
pub mod cli;
pub mod client;
pub mod drive;
pub mod machine;
pub mod metrics;
pub mod overload;
pub mod pd;
pub mod peers;
pub mod ramp;
pub mod rate_limit;
pub mod real_engine;
pub mod report;
pub mod run;
pub mod runner;
pub mod scenario;
pub mod topology;
pub mod twins;
pub mod workload;
