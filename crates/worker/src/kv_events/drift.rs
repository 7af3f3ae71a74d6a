//! [`Drift`]: what an engine sends that this decoder skips or refuses, as
//! the KV-event schema moves on. Every occurrence is counted; each kind is
//! logged once per stream, not once per message (an engine of a newer
//! version repeats the same novelty in every batch).
//!
//! Metrics: `prefix_router_kv_events_undecodable_total{kind}` (batches
//! refused, by `DecodeError::kind`) and
//! `prefix_router_kv_events_unknown_total{level}` (`batch_field`,
//! `event_field`, `event`: fields and events of a newer engine, skipped).

use std::collections::HashSet;

use protocol::kv_events::{DecodeError, KvEventBatch};

/// Per stream: the kinds already logged.
#[derive(Debug, Default)]
pub struct Drift {
    logged: HashSet<&'static str>,
}

impl Drift {
    /// Counts a batch that could not be decoded; logs its kind the first
    /// time (then at debug level).
    pub fn undecodable(&mut self, endpoint: &str, seq: u64, error: &DecodeError) {
        let kind = error.kind();
        metrics::counter!("prefix_router_kv_events_undecodable_total", "kind" => kind).increment(1);
        if self.logged.insert(kind) {
            tracing::warn!(%endpoint, seq, kind, %error,
                "undecodable KV-event batch (logged once per kind; counted in prefix_router_kv_events_undecodable_total)");
        } else {
            tracing::debug!(%endpoint, seq, kind, %error, "undecodable KV-event batch");
        }
    }

    /// Counts the fields and events of `batch` that a newer engine added
    /// and this decoder skipped; logs each level the first time.
    pub fn unknown(&mut self, endpoint: &str, batch: &KvEventBatch) {
        let (batch_fields, event_fields, events) = batch.unknown_counts();
        for (level, n) in [
            ("batch_field", batch_fields),
            ("event_field", event_fields),
            ("event", events),
        ] {
            if n == 0 {
                continue;
            }
            metrics::counter!("prefix_router_kv_events_unknown_total", "level" => level)
                .increment(n as u64);
            if self.logged.insert(level) {
                let tags: Vec<&str> = batch.events.iter().map(|e| e.tag()).collect();
                tracing::info!(%endpoint, level, n, ?tags,
                    "KV events carry fields or events this version does not know; skipped (logged once; counted in prefix_router_kv_events_unknown_total)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_logged_once() {
        let mut d = Drift::default();
        let e = DecodeError::BatchTooShort { len: 1 };
        d.undecodable("tcp://x", 1, &e);
        d.undecodable("tcp://x", 2, &e);
        assert_eq!(d.logged.len(), 1);
        let batch = KvEventBatch {
            ts: 0.0,
            events: Vec::new(),
            data_parallel_rank: None,
            extra_fields: 2,
        };
        d.unknown("tcp://x", &batch);
        d.unknown("tcp://x", &batch);
        assert_eq!(d.logged.len(), 2);
    }
}
