//! The answers a fault touched, against their fault-free twins: after a
//! run with an event, every successful answer that was in flight on a
//! worker when that worker was stopped (killed, or SIGTERMed for a
//! restart) is sent again, with the same body, to the fleet once healthy.
//! With deterministic (greedy-like) sims the twin must be the same text,
//! token count and all; an answer that moved to another worker mid-way
//! must not differ from it. The client cannot tell which answers moved
//! (the routers count them), so "touched" is the superset: moved, or
//! finished on a draining worker.
//!
//! The same measures give the latency a move added: the touched answers'
//! end-to-end times beside the others'.

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::Value;

use crate::client::Client;
use crate::metrics::{Sample, nearest_rank};
use crate::workload::Api;

/// Twins sent at once.
const CONCURRENCY: usize = 8;

/// At most this many differences are described.
const DESCRIBED: usize = 3;

/// One request of a run and the text it got.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// Its endpoint.
    pub api: Api,
    /// Its body, as sent.
    pub body: Value,
    /// The answer's text.
    pub answer: String,
}

/// The touched answers of a run against their twins.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TwinCheck {
    /// Successful answers in flight on a worker when it was stopped.
    pub touched: usize,
    /// Of them, those equal to their twin (text and token count).
    pub equal: usize,
    /// What differed, for the first few that did.
    pub differing: Vec<String>,
    /// End-to-end ms of the touched answers: p50 and max.
    pub touched_e2e_ms: Option<(f64, f64)>,
    /// End-to-end ms of the other successful answers: p50 and max.
    pub others_e2e_ms: Option<(f64, f64)>,
}

/// Indices of the successful samples that were in flight on a worker when
/// it was stopped; `stops` are (worker id, seconds from the start).
pub fn touched(samples: &[Sample], stops: &[(String, f64)]) -> Vec<usize> {
    samples
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.ok()
                && stops.iter().any(|(worker, at)| {
                    s.worker.as_deref() == Some(worker.as_str())
                        && s.start_s <= *at
                        && *at < s.end_s
                })
        })
        .map(|(i, _)| i)
        .collect()
}

/// Sends the `touched` samples' requests again through `client` and
/// compares each answer with its first one; `exchanges` are the samples'
/// requests and answers, in the samples' order.
pub async fn check(
    client: &Client,
    samples: &[Sample],
    exchanges: &[Exchange],
    touched: &[usize],
) -> TwinCheck {
    let pairs: Vec<(&Sample, &Exchange)> = touched
        .iter()
        .filter_map(|&i| Some((samples.get(i)?, exchanges.get(i)?)))
        .collect();
    let verdicts: Vec<Option<String>> =
        futures_util::stream::iter(pairs.iter().map(|(sample, exchange)| async move {
            let twin = client.send(exchange.api, &exchange.body).await;
            if let Some(e) = twin.error {
                return Some(format!("the twin failed: {e}"));
            }
            let same = twin.answer == exchange.answer
                && twin.completion_tokens == sample.completion_tokens;
            (!same).then(|| {
                format!(
                    "{} tokens {:?} against the twin's {} tokens {:?}",
                    sample.completion_tokens,
                    clip(&exchange.answer),
                    twin.completion_tokens,
                    clip(&twin.answer)
                )
            })
        }))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let differing: Vec<String> = verdicts.into_iter().flatten().collect();
    let e2e = |picked: bool| {
        let mut v: Vec<f64> = samples
            .iter()
            .enumerate()
            .filter(|(i, s)| s.ok() && touched.contains(i) == picked)
            .map(|(_, s)| s.e2e_ms)
            .collect();
        v.sort_by(f64::total_cmp);
        let max = *v.last()?;
        Some((nearest_rank(&v, 0.5), max))
    };
    TwinCheck {
        touched: pairs.len(),
        equal: pairs.len() - differing.len(),
        differing: differing.into_iter().take(DESCRIBED).collect(),
        touched_e2e_ms: e2e(true),
        others_e2e_ms: e2e(false),
    }
}

fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(60).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}
