//! The drain deadlines this router knows ([`DrainWatch`]): which workers
//! (by URL) are draining and when their deadline comes. The relay of a
//! migratable answer on a draining worker moves it at that deadline; the
//! router learns the marks from the shared state (`StateStore::drains`,
//! refreshed by `serve`'s drain loop, and at once after an admin drain it
//! served itself).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use state::{StateError, StateStore};
use tokio::sync::watch;
use tokio::time::Instant;

pub(in crate::proxy) use crate::proxy::decision::Deadlines;

/// How often `serve` refreshes the deadlines from the shared state.
pub const DRAIN_REFRESH: Duration = Duration::from_millis(500);

/// The drain deadlines relays watch (see the module docs).
pub struct DrainWatch {
    tx: watch::Sender<Deadlines>,
}

impl Default for DrainWatch {
    fn default() -> Self {
        DrainWatch {
            tx: watch::Sender::new(Arc::default()),
        }
    }
}

impl DrainWatch {
    /// A receiver of every change (for one relay, and the decision's
    /// fallback).
    pub(in crate::proxy) fn subscribe(&self) -> watch::Receiver<Deadlines> {
        self.tx.subscribe()
    }

    /// Reads the draining workers of `models` from the shared state; the
    /// marks of the other models stay as they were.
    pub async fn refresh(&self, store: &StateStore, models: &[String]) -> Result<(), StateError> {
        let mut seen: HashMap<String, HashMap<String, Instant>> = HashMap::new();
        for model in models {
            let now = Instant::now();
            let found = seen.entry(model.clone()).or_default();
            for d in store.drains(model).await? {
                found.insert(d.url, now + d.left);
            }
        }
        self.tx.send_if_modified(|known| {
            let merged = merge(known, &seen);
            let changed = merged != **known;
            if changed {
                *known = Arc::new(merged);
            }
            changed
        });
        Ok(())
    }
}

/// `known` with the marks of the models in `seen` replaced by theirs. A
/// deadline already known stays unless the new one differs by more than
/// the refresh period (each read computes it afresh from the time left,
/// so it moves a little every time).
fn merge(
    known: &HashMap<String, (String, Instant)>,
    seen: &HashMap<String, HashMap<String, Instant>>,
) -> HashMap<String, (String, Instant)> {
    let mut out: HashMap<String, (String, Instant)> = known
        .iter()
        .filter(|(_, (model, _))| !seen.contains_key(model))
        .map(|(url, v)| (url.clone(), v.clone()))
        .collect();
    for (model, urls) in seen {
        for (url, &deadline) in urls {
            let kept = match known.get(url) {
                Some((m, at)) if m == model && close(*at, deadline) => *at,
                _ => deadline,
            };
            out.insert(url.clone(), (model.clone(), kept));
        }
    }
    out
}

fn close(a: Instant, b: Instant) -> bool {
    a.max(b) - a.min(b) <= DRAIN_REFRESH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_replaces_its_models_marks_and_keeps_a_deadline_that_barely_moved() {
        let t = Instant::now();
        let known: HashMap<String, (String, Instant)> = [
            ("http://a".to_owned(), ("m".to_owned(), t)),
            ("http://b".to_owned(), ("m".to_owned(), t)),
            ("http://c".to_owned(), ("other".to_owned(), t)),
        ]
        .into();
        let seen: HashMap<String, HashMap<String, Instant>> = [(
            "m".to_owned(),
            [
                ("http://a".to_owned(), t + Duration::from_millis(100)),
                ("http://d".to_owned(), t + Duration::from_secs(5)),
            ]
            .into(),
        )]
        .into();
        let out = merge(&known, &seen);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(out["http://a"].1, t, "moved by less than a period: kept");
        assert!(!out.contains_key("http://b"), "undrained");
        assert_eq!(out["http://c"].1, t, "another model's mark stays");
        assert_eq!(out["http://d"].1, t + Duration::from_secs(5));
        // An undrained and drained again worker gets its new deadline.
        let later: HashMap<String, HashMap<String, Instant>> = [(
            "m".to_owned(),
            [("http://a".to_owned(), t + Duration::from_secs(9))].into(),
        )]
        .into();
        assert_eq!(
            merge(&out, &later)["http://a"].1,
            t + Duration::from_secs(9)
        );
    }
}
