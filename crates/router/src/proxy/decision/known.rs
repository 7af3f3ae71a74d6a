//! [`Known`]: the workers this router last saw live, per model: the
//! fallback when Valkey is away or has just restarted empty, whether a
//! model has prefill and decode workers, and the workers' load gauges.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use protocol::WorkerRole;

use super::candidates::Target;
use super::worker_gauges::WorkerGauges;
use crate::routing::Candidate;

/// When a model's workers were last seen live, and their (id, url, role).
type SeenWorkers = (Instant, Vec<(String, String, WorkerRole)>);

/// The workers last seen live per model.
#[derive(Debug)]
pub struct Known {
    seen: RwLock<HashMap<String, SeenWorkers>>,
    /// How long a worker seen live stays a fallback target (a worker lease).
    pub(in crate::proxy) known_for: Duration,
    /// Per-worker load gauges, from the decisions' views of the fleet.
    gauges: WorkerGauges,
}

impl Default for Known {
    fn default() -> Self {
        Known {
            seen: RwLock::new(HashMap::new()),
            known_for: Duration::from_secs(15),
            gauges: WorkerGauges::default(),
        }
    }
}

impl Known {
    /// Remembers the live workers a routing step saw, for the fallback. An
    /// empty list does not erase them: it is the case the fallback is for.
    pub fn remember(&self, model: &str, targets: &[Target]) {
        if targets.is_empty() {
            return;
        }
        let workers = targets
            .iter()
            .map(|t| (t.candidate.worker_id.clone(), t.url.clone(), t.role))
            .collect();
        if let Ok(mut seen) = self.seen.write() {
            seen.insert(model.to_owned(), (Instant::now(), workers));
        }
        self.gauges.record(model, targets);
    }

    /// Whether any worker was seen live.
    pub fn any(&self) -> bool {
        self.seen
            .read()
            .is_ok_and(|k| k.values().any(|(_, workers)| !workers.is_empty()))
    }

    /// The roles of `model`'s workers last seen (`None`: none seen yet;
    /// `Some(empty)` when the memory is unreadable).
    pub fn roles(&self, model: &str) -> Option<Vec<WorkerRole>> {
        match self.seen.read() {
            Ok(k) => k
                .get(model)
                .map(|(_, workers)| workers.iter().map(|w| w.2).collect()),
            Err(_) => Some(Vec::new()),
        }
    }

    /// The workers last seen live; with `recent_only`, only if seen within
    /// a worker lease (Valkey answers, so an older memory may be a worker
    /// that really left; while Valkey is away, any memory is better than
    /// none).
    pub fn targets(&self, model: &str, recent_only: bool) -> Vec<Target> {
        let known = self
            .seen
            .read()
            .map(|k| match k.get(model) {
                Some((seen, workers)) if !recent_only || seen.elapsed() <= self.known_for => {
                    workers.clone()
                }
                _ => Vec::new(),
            })
            .unwrap_or_default();
        known
            .into_iter()
            .map(|(worker_id, url, role)| Target {
                candidate: Candidate {
                    worker_id,
                    ..Candidate::default()
                },
                url,
                matched_blocks: 0,
                assigned: false,
                prefill_tokens: 0,
                role,
            })
            .collect()
    }
}
