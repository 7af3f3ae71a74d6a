//! [`WorkerGauges`]: each worker's load as this router last saw it in a
//! routing decision, for dashboards: `prefix_router_worker_in_flight`,
//! `prefix_router_worker_waiting` and `prefix_router_worker_kv_usage`
//! `{model, worker}`. Set at most once a [`PERIOD`] per model, so that a
//! fleet of hundreds of workers costs a few hundred updates a second, not
//! per request; a worker that left stops being exported after the
//! recorder's gauge idle timeout (`serve`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::candidates::Target;

/// Shortest time between two updates of one model's gauges.
pub const PERIOD: Duration = Duration::from_secs(1);

/// When each model's gauges were last set.
#[derive(Debug, Default)]
pub struct WorkerGauges {
    last: Mutex<HashMap<String, Instant>>,
}

impl WorkerGauges {
    /// Sets `model`'s gauges from `targets` unless set less than
    /// [`PERIOD`] ago.
    pub fn record(&self, model: &str, targets: &[Target]) {
        let due = match self.last.lock() {
            Ok(mut last) => match last.get_mut(model) {
                Some(at) if at.elapsed() < PERIOD => false,
                Some(at) => {
                    *at = Instant::now();
                    true
                }
                None => {
                    last.insert(model.to_owned(), Instant::now());
                    true
                }
            },
            Err(_) => false,
        };
        if !due {
            return;
        }
        for t in targets {
            let c = &t.candidate;
            let labels = [("model", model.to_owned()), ("worker", c.worker_id.clone())];
            metrics::gauge!("prefix_router_worker_in_flight", &labels).set(c.in_flight as f64);
            metrics::gauge!("prefix_router_worker_waiting", &labels).set(c.waiting as f64);
            metrics::gauge!("prefix_router_worker_kv_usage", &labels).set(c.kv_usage);
        }
    }
}
