//! [`Pusher`]: the background task that keeps the fleet's view of one
//! worker's cache right: heartbeats with load, batched stored/evicted
//! reports, and periodic full snapshots that heal whatever got lost.
//!
//! One task does every call, one at a time, so the fleet applies them in
//! the order they were made: a flush is never overtaken by an older one,
//! and a snapshot never by reports older than it.
//!
//! Each turn (every `flush_interval`, or at once when woken):
//!
//! 1. paused → nothing at all;
//! 2. backing off after a failure → nothing until the backoff is over;
//! 3. heartbeat, when one is due, when not registered, or before a resync.
//!    A reply with `registered: true` or another incarnation than before
//!    means the fleet forgot the worker: a full resync becomes due. A
//!    heartbeat due while registered, with reports pending and nothing
//!    else due, rides on the flush instead (one `events` request; sent on
//!    its own when the fleet did not take it);
//! 4. sync, when one is due or `sync_interval` has passed (a periodic one
//!    flushes the window first): the pending window is dropped *first*,
//!    then the snapshot is taken, so every dropped report is reflected in
//!    it (reports made after it are sent by the next flush; sending one the
//!    snapshot already reflects is harmless). The snapshot's digests are
//!    sent first; when a few buckets differ, their blocks alone (a
//!    repair); only when many differ, or the repair fell short, is the
//!    whole snapshot;
//! 5. otherwise flush the window's net reports.
//!
//! Any failed call, heartbeats included, schedules a full resync (a lost
//! report cannot be told from a delivered one, and while a resync is due
//! reports are not even kept) and backs off (exponentially, up to
//! `backoff.max`); a 404 `unknown_worker` also forces a heartbeat.

mod resync;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::client::{FleetClient, WorkerIdentity};
use super::config::{BlockSource, PusherConfig};
use super::error::PushError;
use super::handle::{PusherHandle, Shared};
use super::pending::{Batch, ResyncReason};
use protocol::push::HeartbeatReply;

/// The running push task; see the module docs. Dropping it stops the task.
pub struct Pusher {
    handle: PusherHandle,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    client: FleetClient,
    identity: WorkerIdentity,
}

impl Pusher {
    /// Starts the task (inside a Tokio runtime). The first turn registers
    /// the worker and sends a full snapshot.
    pub fn start(client: FleetClient, config: PusherConfig, source: Arc<dyn BlockSource>) -> Self {
        let shared = Arc::new(Shared::new(
            config.max_pending,
            config.drop_evictions,
            config.seed,
            config.paused,
        ));
        let (stop, stop_rx) = watch::channel(false);
        let now = Instant::now();
        let worker = Worker {
            client: client.clone(),
            source,
            shared: Arc::clone(&shared),
            registered: false,
            incarnation: None,
            shards: 1,
            next_heartbeat: now,
            next_sync: now + config.sync_interval,
            retry_at: now,
            failures: 0,
            config: config.clone(),
        };
        let task = tokio::spawn(worker.run(stop_rx));
        Pusher {
            handle: PusherHandle { shared },
            stop,
            task: Some(task),
            client,
            identity: config.identity,
        }
    }

    /// A handle to feed reports and flip switches.
    pub fn handle(&self) -> PusherHandle {
        self.handle.clone()
    }

    /// Marks the worker draining in the fleet (graceful drain): no router
    /// sends it anything new; it keeps its lease (the task goes on
    /// heartbeating) and serves what it has; at `deadline` from now the
    /// routers move the answers still running on it.
    pub async fn drain(&self, deadline: Duration) -> Result<(), PushError> {
        self.client.drain(&self.identity, deadline).await
    }

    /// Stops the task (waiting up to 5 s for a call in progress) and, if
    /// `deregister`, drains the worker from the fleet at once instead of
    /// letting its lease run out.
    pub async fn shutdown(mut self, deregister: bool) -> Result<(), PushError> {
        let _ = self.stop.send(true);
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
        if deregister {
            self.client.deregister(&self.identity).await?;
        }
        Ok(())
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The task's state.
struct Worker {
    client: FleetClient,
    config: PusherConfig,
    source: Arc<dyn BlockSource>,
    shared: Arc<Shared>,
    registered: bool,
    incarnation: Option<u64>,
    /// Shards the fleet splits the model into (its last heartbeat reply).
    shards: usize,
    next_heartbeat: Instant,
    next_sync: Instant,
    /// No call before this (backoff after a failure).
    retry_at: Instant,
    /// Consecutive failures.
    failures: u32,
}

impl Worker {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut tick =
            tokio::time::interval(self.config.flush_interval.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.shared.wake.notified() => {}
                _ = stop.changed() => return,
            }
            self.turn().await;
        }
    }

    async fn turn(&mut self) {
        if self.shared.paused.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        if now < self.retry_at {
            return;
        }
        let (due, pending) = {
            let p = self.shared.pending();
            (p.resync_due(), !p.is_empty())
        };
        let heartbeat_due = now >= self.next_heartbeat || !self.registered || due.is_some();
        if heartbeat_due && self.registered && due.is_none() && now < self.next_sync && pending {
            self.flush_with_heartbeat().await;
            return;
        }
        if heartbeat_due && !self.heartbeat().await {
            return;
        }
        // The heartbeat may have found that the fleet forgot us.
        let due = self.shared.pending().resync_due();
        if due.is_some() || Instant::now() >= self.next_sync {
            if due.is_none() {
                // A periodic sync sends the window first, so that an
                // unchanged fleet's digests match the snapshot's.
                self.flush().await;
                if Instant::now() < self.retry_at {
                    return;
                }
            }
            let due = self.shared.pending().resync_due();
            self.sync(due).await;
        } else {
            self.flush().await;
        }
    }

    async fn heartbeat(&mut self) -> bool {
        let load = self.source.load();
        let family_blocks = self.config.family_blocks;
        match self
            .client
            .heartbeat(&self.config.identity, load, family_blocks)
            .await
        {
            Ok(reply) => {
                self.heartbeat_accepted(reply);
                true
            }
            Err(e) => {
                self.registered = false;
                self.shared.stats.registered.store(false, Ordering::Relaxed);
                self.failed("heartbeat", e);
                false
            }
        }
    }

    /// What a heartbeat's reply tells: the shards, whether the fleet forgot
    /// the worker (a resync), when the next heartbeat is due.
    fn heartbeat_accepted(&mut self, reply: HeartbeatReply) {
        self.shards = reply.shards.unwrap_or(1);
        let forgotten =
            reply.registered || self.incarnation.is_some_and(|i| i != reply.incarnation);
        if forgotten {
            tracing::info!(
                incarnation = reply.incarnation,
                "registered with the fleet; sending a full snapshot"
            );
            self.shared.schedule_resync(ResyncReason::Registered);
        }
        self.incarnation = Some(reply.incarnation);
        self.registered = true;
        let stats = &self.shared.stats;
        stats.registered.store(true, Ordering::Relaxed);
        stats
            .incarnation
            .store(reply.incarnation.saturating_add(1), Ordering::Relaxed);
        stats.heartbeats.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("prefix_router_push_total", "op" => "heartbeat").increment(1);
        // Never let the lease run out between two heartbeats.
        let lease_third = Duration::from_millis(reply.lease_ms / 3);
        let every = self
            .config
            .heartbeat_interval
            .min(lease_third.max(Duration::from_millis(100)));
        self.next_heartbeat = Instant::now() + every;
        self.succeeded();
    }

    /// The flush with the due heartbeat carried by its first request; the
    /// heartbeat on its own after it when the fleet did not take it.
    async fn flush_with_heartbeat(&mut self) {
        let batch = self.shared.pending().take();
        let load = self.source.load();
        let started = std::time::Instant::now();
        let sent = self
            .client
            .events_with_heartbeat(
                &self.config.identity,
                &batch,
                load,
                self.config.family_blocks,
            )
            .await;
        match sent {
            Ok(reply) => {
                self.flushed(&batch, started);
                match reply {
                    Some(reply) => self.heartbeat_accepted(reply),
                    None => {
                        self.heartbeat().await;
                    }
                }
            }
            Err(e) => self.failed("flush", e),
        }
    }

    async fn flush(&mut self) {
        let batch = self.shared.pending().take();
        if batch.is_empty() {
            return;
        }
        let who = &self.config.identity;
        let started = std::time::Instant::now();
        match self.client.events(who, &batch).await {
            Ok(()) => self.flushed(&batch, started),
            Err(e) => {
                self.failed("flush", e);
            }
        }
    }

    /// A flush the fleet accepted: its counters.
    fn flushed(&mut self, batch: &Batch, started: std::time::Instant) {
        // A report reaches the fleet within a flush interval plus this.
        metrics::histogram!("prefix_router_push_flush_seconds")
            .record(started.elapsed().as_secs_f64());
        self.shared.stats.flushes.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("prefix_router_push_total", "op" => "flush").increment(1);
        for (op, n) in [
            ("eviction", batch.evicted.len()),
            ("stored", batch.stored.len()),
        ] {
            metrics::counter!("prefix_router_push_hashes_total", "op" => op).increment(n as u64);
        }
        self.succeeded();
    }

    fn succeeded(&mut self) {
        self.failures = 0;
    }

    fn failed(&mut self, op: &'static str, e: PushError) {
        let delay = self.config.backoff.delay(self.failures);
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Instant::now() + delay;
        // The fleet may have missed a report (or, unreachable, may forget
        // us): resync once it answers again.
        if e.is_unknown_worker() {
            self.registered = false;
            self.shared.stats.registered.store(false, Ordering::Relaxed);
            self.shared.schedule_resync(ResyncReason::Registered);
        } else {
            self.shared.schedule_resync(ResyncReason::PushFailed);
        }
        let stats = &self.shared.stats;
        stats.failures.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = stats.last_error.lock() {
            *last = Some(e.to_string());
        }
        metrics::counter!("prefix_router_push_failures_total", "op" => op).increment(1);
        if e.is_retryable() || e.is_unknown_worker() {
            tracing::warn!(op, error = %e, retry_in = ?delay, "push to the fleet failed; full resync scheduled");
        } else {
            tracing::error!(op, error = %e, retry_in = ?delay, "push refused by the fleet; check the configuration");
        }
    }
}
