//! [`CpuUse`]: CPU seconds of a fleet's processes, by role.

/// CPU seconds used so far, by role (see [`CpuUse::since`] for a phase's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuUse {
    /// Each router replica.
    pub routers: Vec<f64>,
    /// Valkey (every node of a cluster).
    pub valkey: f64,
    /// Each primary of a cluster (empty for one server).
    pub valkey_primaries: Vec<f64>,
    /// All sim-workers together.
    pub sims: f64,
    /// The HAProxy process (0 with the builtin balancer).
    pub balancer: f64,
}

impl CpuUse {
    /// What was used between `earlier` and `self`.
    pub fn since(&self, earlier: &CpuUse) -> CpuUse {
        CpuUse {
            routers: self
                .routers
                .iter()
                .enumerate()
                .map(|(i, r)| r - earlier.routers.get(i).copied().unwrap_or(0.0))
                .collect(),
            valkey: self.valkey - earlier.valkey,
            valkey_primaries: self
                .valkey_primaries
                .iter()
                .enumerate()
                .map(|(i, v)| v - earlier.valkey_primaries.get(i).copied().unwrap_or(0.0))
                .collect(),
            sims: self.sims - earlier.sims,
            balancer: self.balancer - earlier.balancer,
        }
    }

    /// All router replicas together.
    pub fn routers_total(&self) -> f64 {
        self.routers.iter().sum()
    }

    /// The busiest router replica.
    pub fn router_max(&self) -> f64 {
        self.routers.iter().copied().fold(0.0, f64::max)
    }

    /// The busiest cluster primary's CPU over the mean primary's (None
    /// without a cluster or without any use).
    pub fn valkey_spread(&self) -> Option<f64> {
        let n = self.valkey_primaries.len();
        let total: f64 = self.valkey_primaries.iter().sum();
        (n > 0 && total > 0.0).then(|| {
            let max = self.valkey_primaries.iter().copied().fold(0.0, f64::max);
            max * n as f64 / total
        })
    }
}
