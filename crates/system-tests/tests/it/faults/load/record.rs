//! What the client records: how each attempt ended, each request's
//! attempts and answer, and the counts and failures over a run.

use super::*;

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEnd {
    /// A complete 200 answer.
    Ok,
    /// Failed before the response's status line (retryable).
    NoResponse(String),
    /// Cut after the headers, before anything usable (retryable).
    CutBody(String),
    /// A stream cut after its first token (failed).
    CutStream(String),
    /// A status other than 200 (failed).
    Status(u16, String),
    /// No complete answer in time (failed).
    Timeout,
}

impl AttemptEnd {
    pub(super) fn retryable(&self) -> bool {
        matches!(self, AttemptEnd::NoResponse(_) | AttemptEnd::CutBody(_))
    }
}

/// One attempt of a request; times in seconds since the fleet's epoch.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub start: f64,
    pub end: f64,
    pub result: AttemptEnd,
}

/// One request, as the client saw it.
#[derive(Debug, Clone)]
pub struct Record {
    pub id: u64,
    pub doc: usize,
    pub streamed: bool,
    /// When it was first sent (seconds since the epoch).
    pub sent: f64,
    pub attempts: Vec<Attempt>,
    /// A complete 200 answer in the end.
    pub ok: bool,
    /// `x-sim-worker` of the answer.
    pub worker: Option<String>,
    /// `x-prefix-router-worker` of the answer.
    pub routed: Option<String>,
    /// `x-sim-cached-tokens` of the answer.
    pub cached_tokens: Option<u64>,
    /// `/admin/explain` just before: matched blocks per worker.
    pub believed: Option<BTreeMap<String, u64>>,
    /// `/admin/explain`'s prompt tokens.
    pub prompt_tokens: Option<u64>,
}

impl Record {
    /// When its first attempt ended badly, if one did.
    pub fn failed_attempts(&self) -> impl Iterator<Item = &Attempt> {
        self.attempts.iter().filter(|a| a.result != AttemptEnd::Ok)
    }

    /// Blocks the fleet believed the serving worker held (explain mode).
    pub fn believed_blocks(&self) -> Option<u64> {
        let w = self.worker.as_ref()?;
        Some(self.believed.as_ref()?.get(w).copied().unwrap_or(0))
    }
}

/// Counts over a set of records.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub sent: usize,
    pub failed: usize,
    /// Requests that needed more than one attempt.
    pub retried: usize,
    /// Attempts that failed (retried or not).
    pub failed_attempts: usize,
    /// Σ cached tokens / Σ prompt tokens (when known).
    pub cached_share: f64,
}

pub fn counts(records: &[Record]) -> Counts {
    let ok = records.iter().filter(|r| r.ok).count();
    let (mut cached, mut prompt) = (0u64, 0u64);
    for r in records {
        if let (Some(c), Some(p)) = (r.cached_tokens, r.prompt_tokens) {
            cached += c;
            prompt += p;
        }
    }
    Counts {
        sent: records.len(),
        failed: records.len() - ok,
        retried: records.iter().filter(|r| r.attempts.len() > 1).count(),
        failed_attempts: records.iter().map(|r| r.failed_attempts().count()).sum(),
        cached_share: if prompt > 0 {
            cached as f64 / prompt as f64
        } else {
            0.0
        },
    }
}

/// A one-line description of every failed request and attempt.
pub fn failures(records: &[Record]) -> String {
    let mut out = String::new();
    for r in records {
        for a in r.failed_attempts() {
            out.push_str(&format!(
                "  request {} (document {}, {}, sent {:.2}s, {}): attempt {:.2}s..{:.2}s {:?}\n",
                r.id,
                r.doc,
                if r.streamed {
                    "streamed"
                } else {
                    "not streamed"
                },
                r.sent,
                if r.ok { "then ok" } else { "FAILED" },
                a.start,
                a.end,
                a.result
            ));
        }
    }
    out
}
