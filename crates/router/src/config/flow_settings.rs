//! [`FlowSettings`]: when a model's workers are saturated, and the bounds
//! of the waiting room (`flow.rs` resolves them from the flags; `crate::flow` runs them).

use std::collections::BTreeMap;
use std::time::Duration;

use state::SaturationThresholds;

/// Flow control's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSettings {
    /// When a worker is past its limits.
    pub thresholds: SaturationThresholds,
    /// Requests that may wait in this router at once.
    pub max_queued: usize,
    /// Longest wait, unless the priority has its own.
    pub queue_timeout: Duration,
    /// Longest wait per priority.
    pub band_timeouts: BTreeMap<i32, Duration>,
}

impl FlowSettings {
    /// The longest wait of a request of `priority`.
    pub fn timeout_of(&self, priority: i32) -> Duration {
        self.band_timeouts
            .get(&priority)
            .copied()
            .unwrap_or(self.queue_timeout)
    }
}
