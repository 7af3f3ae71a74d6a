//! Worker leases (heartbeat, deregister), router leases and in-flight gauges.

use super::ttl::ms;
use protocol::{MAX_REPORTED_REQUESTS, WorkerLoad, check_name};

use super::{InFlight, Lane, ScriptName, StateError, StateStore};

/// One heartbeat: who the worker is, where it listens, how loaded it is.
#[derive(Debug, Clone)]
pub struct WorkerHeartbeat {
    /// Stable id of the worker.
    pub worker_id: String,
    /// Base URL requests are sent to.
    pub url: String,
    /// Its load, when it reports one (static workers do not).
    pub load: Option<WorkerLoad>,
}

/// A worker's lease after a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLease {
    /// The incarnation number (a new one after every expiry).
    pub incarnation: u64,
    /// How long the lease lasts without another heartbeat, in ms.
    pub lease_ms: u64,
    /// True when this heartbeat registered a new incarnation.
    pub new: bool,
}

impl StateStore {
    /// Registers `hb.worker_id` for `model` or renews its lease and load.
    pub async fn heartbeat(
        &self,
        model: &str,
        hb: &WorkerHeartbeat,
    ) -> Result<WorkerLease, StateError> {
        check_name("worker_id", &hb.worker_id)?;
        let (has_load, load) = match hb.load {
            Some(l) => ("1", l),
            None => ("0", WorkerLoad::default()),
        };
        if !(0.0..=1.0).contains(&load.kv_cache_usage_perc) {
            return Err(StateError::Invalid {
                what: "kv_cache_usage_perc",
                detail: format!("must be within 0..=1, got {}", load.kv_cache_usage_perc),
            });
        }
        let (waiting, running) = (
            load.num_requests_waiting
                .min(MAX_REPORTED_REQUESTS)
                .to_string(),
            load.num_requests_running
                .min(MAX_REPORTED_REQUESTS)
                .to_string(),
        );
        let kv = load.kv_cache_usage_perc.to_string();
        self.admit_model(model).await?;
        let lease = ms(self.ttls().worker_lease);
        let args = [
            hb.worker_id.as_str(),
            &hb.url,
            &lease,
            has_load,
            &waiting,
            &running,
            &kv,
        ];
        // Every part (shard) of the model keeps its own lease; the first
        // part's incarnation stands for the worker's, and a new incarnation
        // in any part means that part holds none of its blocks.
        let parts = self.parts(model)?;
        let leases: Vec<(u64, u64, u8)> =
            futures_util::future::try_join_all(parts.iter().map(|part| async move {
                self.run::<(u64, u64, u8)>(Lane::Bulk, ScriptName::Heartbeat, part, &args)
                    .await
                    .map_err(|e| match e {
                        StateError::Script { ref detail, .. }
                            if detail.contains("worker url conflict") =>
                        {
                            StateError::UrlConflict {
                                worker_id: hb.worker_id.clone(),
                                model: model.to_owned(),
                            }
                        }
                        other => other,
                    })
            }))
            .await?;
        let (incarnation, lease_ms, _) = leases.first().copied().unwrap_or_default();
        let new = u8::from(leases.iter().any(|l| l.2 == 1));
        if new == 1 {
            self.remember_worker_model(&hb.worker_id, model).await?;
            self.note_models([&model.to_owned()]);
        }
        Ok(WorkerLease {
            incarnation,
            lease_ms,
            new: new == 1,
        })
    }

    async fn remember_worker_model(&self, worker_id: &str, model: &str) -> Result<(), StateError> {
        // Two keys in two cluster slots: two commands, not one pipeline.
        let mut add = redis::cmd("SADD");
        add.arg(self.keys().models()).arg(model);
        let mut set = redis::cmd("HSET");
        set.arg(self.keys().worker_models())
            .arg(worker_id)
            .arg(model);
        self.command::<()>(add).await?;
        self.command::<()>(set).await
    }

    /// The model a worker last registered for, if any.
    pub async fn worker_model(&self, worker_id: &str) -> Result<Option<String>, StateError> {
        check_name("worker_id", worker_id)?;
        let mut cmd = redis::cmd("HGET");
        cmd.arg(self.keys().worker_models()).arg(worker_id);
        self.command(cmd).await
    }

    /// Every model that ever had a worker in this namespace, sorted.
    pub async fn models(&self) -> Result<Vec<String>, StateError> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(self.keys().models());
        let mut models: Vec<String> = self.command(cmd).await?;
        models.sort();
        self.note_models(&models);
        Ok(models)
    }

    /// Drains a worker: out of routing at once, entries purged in the
    /// background by [`StateStore::purge`]. False when it was unknown.
    pub async fn deregister(&self, model: &str, worker_id: &str) -> Result<bool, StateError> {
        check_name("worker_id", worker_id)?;
        let parts = self.parts(model)?;
        let mut known = false;
        for part in parts.iter() {
            let idx: u64 = self
                .run(Lane::Bulk, ScriptName::Deregister, part, &[worker_id])
                .await?;
            known |= idx != 0;
        }
        Ok(known)
    }

    /// Records load a worker reported outside heartbeats (the ORCA header,
    /// a scrape of its `/metrics`): queue, running requests and KV usage,
    /// each when given. False when the worker has no live lease.
    pub async fn report_load(
        &self,
        model: &str,
        worker_id: &str,
        waiting: Option<u64>,
        running: Option<u64>,
        kv_cache_usage_perc: Option<f64>,
    ) -> Result<bool, StateError> {
        check_name("worker_id", worker_id)?;
        let parts = self.parts(model)?;
        if parts.len() > 1 {
            // Every part: batched (fan_out); the worker's lease is not
            // checked here, and unknown workers are skipped there.
            let report = crate::fan_out::LoadReport {
                waiting,
                running,
                kv: kv_cache_usage_perc,
            };
            for part in parts.iter() {
                self.queue_load(part, worker_id, report);
            }
            return Ok(true);
        }
        let bounded = |n: u64| n.min(MAX_REPORTED_REQUESTS).to_string();
        let waiting = waiting.map(bounded).unwrap_or_default();
        let running = running.map(bounded).unwrap_or_default();
        let kv = kv_cache_usage_perc
            .map(|k| k.clamp(0.0, 1.0).to_string())
            .unwrap_or_default();
        let args = [worker_id, waiting.as_str(), &kv, &running];
        let recorded: u8 = self
            .run(Lane::Bulk, ScriptName::Load, &parts[0], &args)
            .await?;
        Ok(recorded == 1)
    }

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

    /// Adds `delta` to this router's in-flight count for a worker (in every
    /// part of the model); returns this router's new count (0 for a sharded
    /// model, whose parts get the change in the next batch).
    pub async fn add_in_flight(
        &self,
        model: &str,
        worker_id: &str,
        delta: i64,
    ) -> Result<u64, StateError> {
        self.change_in_flight(model, worker_id, InFlight::requests(delta))
            .await
    }

    /// Adds `delta` to this router's in-flight gauges for a worker (in
    /// every part of the model): its requests and their prefill tokens.
    /// Returns this router's new request count (0 for a sharded model, and
    /// for a change of prefill tokens alone: both go out in the next batch,
    /// within 10 ms).
    pub async fn change_in_flight(
        &self,
        model: &str,
        worker_id: &str,
        delta: InFlight,
    ) -> Result<u64, StateError> {
        self.add_in_flight_except(model, worker_id, delta, None)
            .await
    }

    /// [`change_in_flight`](Self::change_in_flight) in every part but
    /// `skip` (the part whose routing call already counted the request).
    /// Every count of a new request passes here, so here the router takes
    /// its first lease in a model ([`lease_if_new`](Self::lease_if_new)).
    pub(crate) async fn add_in_flight_except(
        &self,
        model: &str,
        worker_id: &str,
        delta: InFlight,
        skip: Option<&str>,
    ) -> Result<u64, StateError> {
        check_name("worker_id", worker_id)?;
        let parts = self.parts(model)?;
        let new_request = delta.requests > 0;
        // A prefill's end (tokens only, taken off at a response's first
        // byte) can wait for the next batch: one call per flush instead of
        // one per request.
        let prefill_done = delta.requests == 0 && delta.prefill_tokens < 0;
        if parts.len() == 1 && !prefill_done {
            // Unsharded: at once, unless the routing call already counted it.
            let mut n = 0;
            if Some(parts[0].as_str()) != skip {
                n = self.add_in_flight_part(&parts[0], worker_id, delta).await?;
            }
            if new_request {
                self.lease_if_new(model).await;
            }
            return Ok(n);
        }
        // A sharded model, or a prefill's end: batched per part (fan_out),
        // into the ledger with its batch.
        for part in parts.iter().filter(|p| Some(p.as_str()) != skip) {
            self.queue_in_flight(part, worker_id, delta);
        }
        if new_request {
            self.lease_if_new(model).await;
        }
        Ok(0)
    }

    /// In-flight change in one part, and in its ledger.
    async fn add_in_flight_part(
        &self,
        model: &str,
        worker_id: &str,
        delta: InFlight,
    ) -> Result<u64, StateError> {
        let router = self.router_id().to_owned();
        // A release counts at once (the request is over, whatever Valkey
        // does with it); an increment once Valkey has it.
        self.inner.ledger.add(model, worker_id, delta.decrease());
        let n = self
            .run(
                Lane::Bulk,
                ScriptName::Inflight,
                model,
                &[
                    &router,
                    worker_id,
                    &delta.requests.to_string(),
                    &delta.prefill_tokens.to_string(),
                ],
            )
            .await?;
        self.inner.ledger.add(model, worker_id, delta.increase());
        Ok(n)
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
