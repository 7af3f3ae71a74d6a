//! Worker leases (heartbeat, deregister, load) and in-flight gauges; the
//! router's own leases are in `router_lease`.

use super::ttl::ms;
use protocol::{MAX_REPORTED_REQUESTS, WorkerLoad, WorkerRole, check_name};

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
    /// Registers `hb.worker_id` for `model` or renews its lease and load;
    /// its role, if it had one, stays (see [`heartbeat_as`](Self::heartbeat_as)).
    pub async fn heartbeat(
        &self,
        model: &str,
        hb: &WorkerHeartbeat,
    ) -> Result<WorkerLease, StateError> {
        self.heartbeat_as(model, hb, None).await
    }

    /// As [`heartbeat`](Self::heartbeat), registering the worker's
    /// prefill/decode `role` too; `None` leaves the record's role as it is
    /// (a static worker's heartbeat must not undo the role its own pushes
    /// register), and a new incarnation without one is both.
    pub async fn heartbeat_as(
        &self,
        model: &str,
        hb: &WorkerHeartbeat,
        role: Option<WorkerRole>,
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
            role.map_or("", WorkerRole::as_str),
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
            .run(Lane::Bulk, ScriptName::ReportLoad, &parts[0], &args)
            .await?;
        Ok(recorded == 1)
    }

    /// Adds `delta` to this router's in-flight gauges for a worker (in
    /// every part of the model): its requests and their prefill tokens.
    /// Returns this router's new request count (0 for a sharded model, and
    /// for a change of prefill tokens alone: both go out in the next batch,
    /// within 10 ms). A change sent at once carries the worker's changes
    /// queued in its part (see [`release_in_flight`](Self::release_in_flight)).
    /// A new request's count takes this router's first lease in a model
    /// ([`lease_if_new`](Self::lease_if_new)).
    pub async fn change_in_flight(
        &self,
        model: &str,
        worker_id: &str,
        delta: InFlight,
    ) -> Result<u64, StateError> {
        check_name("worker_id", worker_id)?;
        let parts = self.parts(model)?;
        // A prefill's end (tokens only, taken off at a response's first
        // byte) can wait for the next batch: one call per flush instead of
        // one per request.
        let prefill_done = delta.requests == 0 && delta.prefill_tokens < 0;
        let mut n = 0;
        if let ([part], false) = (&parts[..], prefill_done) {
            // Unsharded: at once, and in the ledger. A release counts at
            // once (the request is over, whatever Valkey does with it); an
            // increment once Valkey has it. The worker's changes queued in
            // this part (a short answer's prefill end, taken off at its
            // first byte) go with it rather than in the next batch: one
            // call instead of two, and into the ledger as a flush takes
            // them (their decreases now, the rest once Valkey has it).
            let queued = self.take_queued_in_flight(part, worker_id);
            let sent = queued.map_or(delta, |q| delta.plus(q.net));
            self.inner.ledger.add(part, worker_id, delta.decrease());
            if let Some(q) = &queued {
                self.inner.ledger.add(part, worker_id, q.decreases);
            }
            let router = self.router_id().to_owned();
            n = self
                .run(
                    Lane::Bulk,
                    ScriptName::ChangeInFlight,
                    part,
                    &[
                        &router,
                        worker_id,
                        &sent.requests.to_string(),
                        &sent.prefill_tokens.to_string(),
                    ],
                )
                .await?;
            self.inner.ledger.add(part, worker_id, delta.increase());
            if let Some(q) = &queued {
                self.inner.ledger.add(part, worker_id, q.increases());
            }
        } else {
            // A sharded model, or a prefill's end: batched per part
            // (fan_out), into the ledger with its batch.
            for part in parts.iter() {
                self.queue_in_flight(part, worker_id, delta);
            }
        }
        if delta.requests > 0 {
            self.lease_if_new(model).await;
        }
        Ok(n)
    }

    /// Takes `done` (a request's count, or its prefill tokens, at its
    /// end) off this router's in-flight gauges for a worker in the next
    /// batch (fan_out, within 10 ms), or sooner with the worker's next
    /// change sent at once ([`change_in_flight`](Self::change_in_flight)
    /// of an unsharded model: a request's end carries its prefill's end),
    /// in every part of the model: one call per flush for every release
    /// instead of one per request. Into the
    /// ledger with its batch (only the decreases if the batch is lost: the
    /// requests are over, whatever Valkey does).
    pub fn release_in_flight(
        &self,
        model: &str,
        worker_id: &str,
        done: InFlight,
    ) -> Result<(), StateError> {
        check_name("worker_id", worker_id)?;
        for part in self.parts(model)?.iter() {
            self.queue_in_flight(part, worker_id, done.decrease());
        }
        Ok(())
    }

    /// A new request that the routing call in `counted` (a part of
    /// `model`) already counted in flight with `delta`: counted in the
    /// model's other parts too, batched (fan_out), so that their routes
    /// weigh it a moment later; and this router's first lease in the model
    /// taken ([`lease_if_new`](Self::lease_if_new)).
    pub(crate) async fn count_in_other_parts(
        &self,
        model: &str,
        counted: &str,
        worker_id: &str,
        delta: InFlight,
    ) -> Result<(), StateError> {
        let parts = self.parts(model)?;
        for part in parts.iter().filter(|p| p.as_str() != counted) {
            self.queue_in_flight(part, worker_id, delta);
        }
        self.lease_if_new(model).await;
        Ok(())
    }
}
