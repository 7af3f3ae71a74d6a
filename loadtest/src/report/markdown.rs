//! `report.md`: the command, the machine, the settings, then one section per
//! scenario (main table, plots, CPU, failures), then how the measures are
//! computed, so that the numbers can be read without the source.

use super::cpu_table::cpu_table;
use super::table::{answers_table, around_table, failures, main_table, markdown};
use super::{RunReport, plot_names};

/// How each measure is computed (kept beside the numbers).
const METHOD: &str = "\
## How the measures are computed

* **hit rate**: Σ `x-sim-cached-tokens` / Σ prompt tokens over the successful
  requests, as the workers report them (the cached tokens come from the
  sim's header, or `usage.prompt_tokens_details.cached_tokens`; the prompt
  tokens from `usage.prompt_tokens`, or the token-id prompt's length).
* **TTFT**: from sending the request to the first SSE chunk with content
  (chat's role chunk does not count); streamed runs only.
* **E2E**: from sending to the end of the answer (`data: [DONE]`).
* Percentiles are nearest-rank over the successful requests.
* **req/s, tok/s**: successful requests, and their prompt + output tokens,
  divided by the time from the first send to the last answer.
* **imbalance**: max / mean prompt tokens per worker (from `x-sim-worker`,
  else `x-prefix-router-worker`), over every launched worker.
* **failed**: non-2xx answers, transport errors, timeouts, and streams that
  ended without `data: [DONE]` or without a `finish_reason`.
* **truncated** (scenarios with an event): the failed streams that began
  and ended incomplete (cut, ended by an error event, or without `[DONE]`
  or a `finish_reason`);
  **migrated**, **not migrated**, **moves failed**: the routers'
  `prefix_router_migrations_total` by outcome over the arm;
  **twin-equal** (scenarios that stop workers): of the successful answers
  in flight on a worker when it was stopped (*touched*: moved, or finished
  while it drained), those whose text and token count equal their twin's,
  the same request sent again once the run ended (deterministic sims:
  equal unless the move lost or repeated a token); **E2E p50 / max ms**
  of the touched answers beside the other successful ones' (the latency a
  move added).
* **overhead**: before the workload, small non-streamed completions (one
  output token, shorter than one KV block) sent alternately straight to one
  sim-worker and through the balancer; the difference of the p50s and of
  the p99s. It includes the balancer, the router and the extra hop.
* **CPU**: user + system time of each process during the workload
  (`/proc/<pid>/stat`), in % of one core; *machine* is the busy share of
  all cores (`/proc/stat`), other programs included. *ms/req* is that CPU
  time over the requests completed. HAProxy relays the same bytes as the
  routers without routing them: its ms/req is what relaying alone costs.
* Time series: requests bucketed by send time; the vertical line is the
  scenario's event.

## The `isolated` arm

`isolated` emulates routers that each keep their own in-memory, approximate
view of the caches (as in-process prefix-tree routers do): every replica
runs our `cache_aware` policy with its own `--key-prefix` namespace and a
static `--worker` list, and the sim-workers report nothing (no push), so a
replica only knows the prefixes it routed itself (its speculative claims,
kept `--isolated-ttl`), never what other replicas routed nor what the
workers evicted. The L4 balancer spreads connections over the replicas, so
requests sharing a prefix reach different replicas with different views.
";

/// The whole report as Markdown.
pub fn render(r: &RunReport) -> String {
    let mut out = format!("# Load test, {}\n\n", r.date);
    out.push_str(&format!("Command:\n\n```sh\n{}\n```\n\n", r.command));
    out.push_str(&format!("{}\n\n", r.machine.summary()));
    out.push_str(&format!("Workload: {}\n\n", r.workload));
    let rows: Vec<Vec<String>> = r
        .settings
        .iter()
        .map(|(k, v)| vec![k.clone(), v.clone()])
        .collect();
    out.push_str(&markdown(&["setting", "value"], &rows));
    for s in &r.scenarios {
        out.push_str(&format!("\n## Scenario: {}\n\n", s.scenario.name()));
        for a in &s.arms {
            if let Some(e) = &a.event {
                out.push_str(&format!("* {}: at {:.1} s, {}\n", a.label, e.at_s, e.what));
            }
        }
        if s.arms.iter().any(|a| a.event.is_some()) {
            out.push('\n');
        }
        out.push_str(&main_table(&s.arms));
        let around = around_table(&s.arms);
        if !around.is_empty() {
            out.push_str("\nBefore and after the event (requests by send time):\n\n");
            out.push_str(&around);
        }
        let answers = answers_table(&s.arms);
        if !answers.is_empty() {
            out.push_str("\nAnswers under the fault:\n\n");
            out.push_str(&answers);
        }
        let (hit, ttft) = plot_names(s.scenario);
        out.push_str(&format!(
            "\n![hit rate over time]({hit})\n\n![TTFT p50 over time]({ttft})\n"
        ));
        let cpu = cpu_table(&s.arms);
        if !cpu.is_empty() {
            out.push_str("\nCPU during the workload (% of one core):\n\n");
            out.push_str(&cpu);
        }
        let f = failures(&s.arms);
        if !f.is_empty() {
            out.push_str("\nFailures:\n\n");
            out.push_str(&f);
        }
    }
    out.push('\n');
    out.push_str(METHOD);
    out
}
