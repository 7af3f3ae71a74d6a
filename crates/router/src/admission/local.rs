//! [`LocalBuckets`]: the degraded mode's rate limits, when Valkey cannot
//! be reached: the same GCRA as `limit_admit.lua`, kept in this router's
//! memory, over the share of each limit the caller gives it (the limit
//! divided by the live routers last seen).

use std::collections::HashMap;
use std::time::Instant;

use state::{Gcra, LimitReason};

/// Tenants tracked before idle ones (arrival time passed) are dropped.
const MAX_TENANTS: usize = 10_000;

/// Arrival times per tenant, in µs since `origin`.
pub(super) struct LocalBuckets {
    origin: Instant,
    tats: HashMap<String, [u64; 2]>,
}

/// A local decision: the debts after admission (µs), or the refusal and
/// the wait before a retry could pass (µs).
pub(super) type LocalVerdict = Result<[u64; 2], (LimitReason, u64)>;

impl LocalBuckets {
    pub(super) fn new() -> Self {
        LocalBuckets {
            origin: Instant::now(),
            tats: HashMap::new(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Admits one request of `tenant` costing `cost` tokens against
    /// `limits` (requests, tokens), all or nothing.
    pub(super) fn admit(
        &mut self,
        tenant: &str,
        limits: [Option<Gcra>; 2],
        cost: u64,
    ) -> LocalVerdict {
        let now = self.now();
        if self.tats.len() >= MAX_TENANTS {
            self.tats.retain(|_, t| t[0] > now || t[1] > now);
        }
        let tats = self.tats.get(tenant).copied().unwrap_or([now, now]);
        let mut after = [now, now];
        let mut refused: Option<(LimitReason, u64)> = None;
        for (i, (limit, reason)) in limits
            .iter()
            .zip([LimitReason::Requests, LimitReason::Tokens])
            .enumerate()
        {
            let Some(g) = limit else { continue };
            let c = if i == 0 { 1 } else { cost };
            let tat = tats[i].max(now);
            let next = tat.saturating_add(c.saturating_mul(g.interval_us));
            let allowed = g.tolerance_us.max(c.saturating_mul(g.interval_us));
            let over = (next - now).saturating_sub(allowed);
            if over > 0 {
                let wait = refused.map_or(over, |(_, w)| w.max(over));
                refused = Some((refused.map_or(reason, |(r, _)| r), wait));
            }
            after[i] = next;
        }
        if let Some(r) = refused {
            return Err(r);
        }
        self.tats.insert(tenant.to_owned(), after);
        Ok([after[0] - now, after[1] - now])
    }

    /// Corrects `tenant`'s tokens by `delta` (used minus reserved).
    pub(super) fn correct(&mut self, tenant: &str, tokens: Gcra, delta: i64) {
        let now = self.now();
        if let Some(t) = self.tats.get_mut(tenant) {
            let shift = delta.unsigned_abs().saturating_mul(tokens.interval_us);
            t[1] = if delta >= 0 {
                t[1].max(now).saturating_add(shift)
            } else {
                t[1].saturating_sub(shift)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let mut b = LocalBuckets::new();
        // 10 per 10 s with a burst of 2: three at once, then refused.
        let g = Gcra {
            interval_us: 1_000_000,
            tolerance_us: 3_000_000,
        };
        for _ in 0..3 {
            assert!(b.admit("t", [Some(g), None], 0).is_ok());
        }
        let (reason, wait) = b.admit("t", [Some(g), None], 0).unwrap_err();
        assert_eq!(reason, LimitReason::Requests);
        assert!(wait > 900_000 && wait <= 1_000_000, "{wait}");
        // Another tenant is not affected.
        assert!(b.admit("u", [Some(g), None], 0).is_ok());
    }

    #[test]
    fn tokens_are_reserved_and_corrected() {
        let mut b = LocalBuckets::new();
        let g = Gcra {
            interval_us: 1_000,
            tolerance_us: 100_000,
        };
        assert!(b.admit("t", [None, Some(g)], 100).is_ok());
        assert!(b.admit("t", [None, Some(g)], 1).is_err());
        // The answer used 10 of the 100: 90 come back.
        b.correct("t", g, -90);
        assert!(b.admit("t", [None, Some(g)], 50).is_ok());
    }
}
