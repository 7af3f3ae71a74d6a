//! This router's leases on a model's parts (`router_lease.lua`): while a
//! lease lives its in-flight counts weigh on routing, and each renewal
//! reconciles the shared counts with this router's ledger of them.

use super::ttl::ms;
use super::{InFlight, Lane, ScriptName, StateError, StateStore};

impl StateStore {
    /// Renews this router's lease for `model` (a zero lease ends it). This
    /// process's first renewal for a model also drops in-flight counts left
    /// under the same router id by an earlier process.
    pub async fn router_lease(
        &self,
        model: &str,
        lease: std::time::Duration,
    ) -> Result<u64, StateError> {
        let parts = self.parts(model)?;
        let mut live = 0;
        for (i, part) in parts.iter().enumerate() {
            let n = self.router_lease_part(part, lease, true).await?;
            if i == 0 {
                live = n;
            }
        }
        Ok(live)
    }

    /// Leases this router on `model`'s parts it has no lease in yet, right
    /// after it counted a request there (so only in a model that has live
    /// workers: a client's made-up model name never gets keys). A router's
    /// in-flight counts weigh only while its lease lives, and the lease
    /// loop takes up to a period to find a model that appeared after the
    /// router started (workers registered by heartbeat): until then its
    /// requests went uncounted.
    /// Bounded by the routing deadline, tried at most once a second per
    /// model (so a Valkey outage costs requests no more than that).
    pub(crate) async fn lease_if_new(&self, model: &str) {
        let Ok(parts) = self.parts(model) else {
            return;
        };
        if parts.iter().all(|p| self.leased_models().contains(p)) {
            return;
        }
        let mut tried = self.inner.first_lease.lock().await;
        let now = std::time::Instant::now();
        if tried
            .get(model)
            .is_some_and(|t| now.duration_since(*t) < std::time::Duration::from_secs(1))
        {
            return;
        }
        if tried.len() >= 4096 {
            tried.clear();
        }
        tried.insert(model.to_owned(), now);
        let lease = self.ttls().router_lease;
        let wait = self.inner.conns.hot_timeout();
        let leased = tokio::time::timeout(wait, async {
            for part in parts.iter() {
                if !self.leased_models().contains(part) {
                    self.router_lease_part(part, lease, false).await?;
                }
            }
            Ok::<(), StateError>(())
        })
        .await;
        if !matches!(leased, Ok(Ok(()))) {
            tracing::debug!(model, "first router lease not taken; the lease loop will");
        }
    }

    /// [`router_lease`](Self::router_lease) of one part, with the ledger
    /// of the requests counted in it. `clear_first`: this process's first
    /// lease of the part drops the counts left under its router id (a
    /// request's own first lease does not: a request counted a moment
    /// earlier, its reply not yet in the ledger, would be dropped with them;
    /// stale counts are reconciled away within two renewals anyway).
    async fn router_lease_part(
        &self,
        model: &str,
        lease: std::time::Duration,
        clear_first: bool,
    ) -> Result<u64, StateError> {
        let router = self.router_id().to_owned();
        let first = !self.leased_models().contains(model);
        let fresh = clear_first && first;
        let ledger = &self.inner.ledger;
        // No flush between reading the ledger and reconciling (a batch is
        // in both, or in neither).
        let _gate = self.inner.fan_out.gate.lock().await;
        let snapshot = ledger.snapshot(model);
        let mut args = vec![
            router,
            ms(lease),
            if fresh { "1" } else { "0" }.to_owned(),
            snapshot.len().to_string(),
        ];
        for (worker, held, excess) in snapshot {
            args.extend([
                worker,
                held.requests.to_string(),
                excess.requests.to_string(),
                held.prefill_tokens.to_string(),
                excess.prefill_tokens.to_string(),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (live, excess): (u64, Vec<(String, InFlight)>) = self
            .run::<Vec<redis::Value>>(Lane::Bulk, ScriptName::RouterLease, model, &args)
            .await
            .and_then(|reply| lease_reply(&reply))?;
        if lease <= std::time::Duration::from_millis(1) {
            ledger.forget(model);
        } else {
            ledger.set_excess(model, excess.into_iter().collect());
        }
        if first {
            self.leased_models().insert(model.to_owned());
        }
        Ok(live)
    }
}

/// Decodes `router_lease.lua`'s {live routers, then (worker, request
/// excess, prefill token excess) triples}.
fn lease_reply(reply: &[redis::Value]) -> Result<(u64, Vec<(String, InFlight)>), StateError> {
    use redis::FromRedisValue;
    let bad = |detail: String| StateError::Script {
        script: ScriptName::RouterLease.file(),
        detail,
    };
    let (first, triples) = reply
        .split_first()
        .ok_or_else(|| bad("an empty reply".into()))?;
    let live = u64::from_redis_value(first.clone()).map_err(|e| bad(e.to_string()))?;
    if triples.len() % 3 != 0 {
        return Err(bad(format!("{} values after the count", triples.len())));
    }
    let count = |v: &redis::Value| i64::from_redis_value(v.clone()).map_err(|e| bad(e.to_string()));
    let excess = triples
        .chunks(3)
        .map(|t| {
            Ok((
                String::from_redis_value(t[0].clone()).map_err(|e| bad(e.to_string()))?,
                InFlight {
                    requests: count(&t[1])?,
                    prefill_tokens: count(&t[2])?,
                },
            ))
        })
        .collect::<Result<_, StateError>>()?;
    Ok((live, excess))
}
