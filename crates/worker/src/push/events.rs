//! [`FleetClient::events`]: one flush's reports in one request
//! (`POST /internal/events`), evictions first and then the stored blocks
//! tier by tier (the order the two older requests went in), split into
//! requests of at most `max_batch` hashes.
//!
//! A fleet that predates the endpoint answers 404 `not_found`; the client
//! then sends the same reports as `/internal/eviction` and
//! `/internal/stored` requests, and keeps doing so (without asking again)
//! for [`RETRY_EVENTS_AFTER`], when it tries the new endpoint again (a
//! rolling upgrade may have reached the fleet meanwhile).

use std::borrow::Cow;
use std::time::{Duration, Instant};

use super::client::{FleetClient, WorkerIdentity, heartbeat_body};
use super::error::PushError;
use super::pending::Batch;
use super::wire::wire_blocks;
use protocol::Tier;
use protocol::WorkerLoad;
use protocol::family::FamilyBlock;
use protocol::push::{
    BlockEvents, EventKind, EventsBody, EventsReply, HeartbeatBody, HeartbeatReply,
};

/// How long a client that met a fleet without `/internal/events` keeps to
/// the two older requests before it asks again.
pub const RETRY_EVENTS_AFTER: Duration = Duration::from_secs(600);

/// One event of a request: `Some(tier)` stored on it, `None` evicted.
type Event<'a> = (Option<Tier>, &'a [FamilyBlock]);

/// `batch` as events, in the order they are applied: the evictions, then
/// the stored blocks of each tier, fastest first (empty ones left out).
fn ordered(batch: &Batch) -> Vec<(Option<Tier>, Vec<FamilyBlock>)> {
    let mut out = vec![(None, batch.evicted.clone())];
    for tier in Tier::ALL {
        let on = batch.stored.iter().filter(|b| b.tier == tier).copied();
        out.push((Some(tier), on.collect()));
    }
    out.retain(|(_, blocks)| !blocks.is_empty());
    out
}

/// `events` cut into requests of at most `size` hashes, in order.
fn requests(events: &[(Option<Tier>, Vec<FamilyBlock>)], size: usize) -> Vec<Vec<Event<'_>>> {
    let size = size.max(1);
    let mut out: Vec<Vec<Event<'_>>> = Vec::new();
    let mut room = 0;
    for (kind, blocks) in events {
        for piece in cut(blocks, &mut room, size) {
            if piece.starts_request {
                out.push(Vec::new());
            }
            if let Some(request) = out.last_mut() {
                request.push((*kind, piece.blocks));
            }
        }
    }
    out
}

struct Piece<'a> {
    starts_request: bool,
    blocks: &'a [FamilyBlock],
}

/// `blocks` in pieces that fill the current request's `room`, then new
/// requests of `size`.
fn cut<'a>(blocks: &'a [FamilyBlock], room: &mut usize, size: usize) -> Vec<Piece<'a>> {
    let mut out = Vec::new();
    let mut rest = blocks;
    while !rest.is_empty() {
        let starts_request = *room == 0;
        if starts_request {
            *room = size;
        }
        let (now, later) = rest.split_at(rest.len().min(*room));
        *room -= now.len();
        out.push(Piece {
            starts_request,
            blocks: now,
        });
        rest = later;
    }
    out
}

impl FleetClient {
    /// Sends one flush's reports (see the module docs). An empty batch
    /// sends nothing.
    pub async fn events(&self, who: &WorkerIdentity, batch: &Batch) -> Result<(), PushError> {
        self.send_events(who, batch, None).await.map(|_| ())
    }

    /// [`events`](Self::events) with the worker's heartbeat carried by the
    /// first request: the heartbeat's reply, or `None` when it was not
    /// carried (an empty batch, a fleet without `/internal/events` or that
    /// predates carried heartbeats): then send it on its own.
    pub async fn events_with_heartbeat(
        &self,
        who: &WorkerIdentity,
        batch: &Batch,
        load: Option<WorkerLoad>,
        family_blocks: Option<usize>,
    ) -> Result<Option<HeartbeatReply>, PushError> {
        let hb = heartbeat_body(who, load, family_blocks);
        self.send_events(who, batch, Some(hb)).await
    }

    async fn send_events(
        &self,
        who: &WorkerIdentity,
        batch: &Batch,
        mut heartbeat: Option<HeartbeatBody<'_>>,
    ) -> Result<Option<HeartbeatReply>, PushError> {
        let events = ordered(batch);
        let mut reply = None;
        for request in requests(&events, self.batch()) {
            if self.events_refused_lately() {
                self.legacy_events(who, &request).await?;
                continue;
            }
            match self.events_request(who, &request, heartbeat.take()).await {
                Err(e) if is_missing_route(&e) => {
                    tracing::info!(
                        error = %e,
                        "the fleet has no /internal/events; sending stored and eviction requests"
                    );
                    self.remember_events_refused();
                    self.legacy_events(who, &request).await?;
                }
                Err(e) => return Err(e),
                Ok(hb) => reply = reply.or(hb),
            }
        }
        Ok(reply)
    }

    async fn events_request(
        &self,
        who: &WorkerIdentity,
        request: &[Event<'_>],
        heartbeat: Option<HeartbeatBody<'_>>,
    ) -> Result<Option<HeartbeatReply>, PushError> {
        let events = request
            .iter()
            .map(|&(stored_on, blocks)| {
                let (hashes, families) = wire_blocks(blocks);
                BlockEvents {
                    kind: match stored_on {
                        Some(_) => EventKind::Stored,
                        None => EventKind::Evicted,
                    },
                    block_hashes: Cow::Owned(hashes),
                    families,
                    medium: stored_on.filter(|&t| t != Tier::Gpu),
                }
            })
            .collect();
        let body = EventsBody {
            worker_id: who.worker_id.as_str().into(),
            model: Some(who.model.as_str().into()),
            events,
            heartbeat,
        };
        let reply = self.send(self.post("events", &body)).await?;
        // A fleet that predates carried heartbeats answers without one.
        Ok(serde_json::from_value::<EventsReply>(reply)
            .ok()
            .and_then(|r| r.heartbeat))
    }

    /// The same reports as the two older requests, in the same order.
    async fn legacy_events(
        &self,
        who: &WorkerIdentity,
        request: &[Event<'_>],
    ) -> Result<(), PushError> {
        for &(stored_on, blocks) in request {
            match stored_on {
                Some(_) => self.stored(who, blocks).await?,
                None => self.evicted(who, blocks).await?,
            }
        }
        Ok(())
    }

    fn events_refused_lately(&self) -> bool {
        let at = self
            .events_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        at.is_some_and(|t| t.elapsed() < RETRY_EVENTS_AFTER)
    }

    fn remember_events_refused(&self) {
        let mut at = self
            .events_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *at = Some(Instant::now());
    }
}

/// A fleet without the route: its 404 `not_found` (an unknown worker's
/// 404 is `unknown_worker`, and handled as one).
fn is_missing_route(e: &PushError) -> bool {
    matches!(e, PushError::Status { status: 404, kind, .. } if kind == "not_found")
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::hashing::BlockHash;

    fn on(v: u64, tier: Tier) -> FamilyBlock {
        FamilyBlock {
            tier,
            ..FamilyBlock::unplaced(BlockHash(v))
        }
    }

    #[test]
    fn a_batch_goes_evictions_first_then_tier_by_tier_in_requests_of_max_batch() {
        let batch = Batch {
            stored: vec![on(1, Tier::Cpu), on(2, Tier::Gpu), on(3, Tier::Gpu)],
            evicted: vec![on(4, Tier::Gpu), on(5, Tier::Gpu)],
        };
        let events = ordered(&batch);
        let shape = |reqs: Vec<Vec<Event<'_>>>| -> Vec<Vec<(Option<Tier>, Vec<u64>)>> {
            reqs.into_iter()
                .map(|r| {
                    r.into_iter()
                        .map(|(k, b)| (k, b.iter().map(|x| x.hash.0).collect()))
                        .collect()
                })
                .collect()
        };
        assert_eq!(
            shape(requests(&events, 3)),
            vec![
                vec![(None, vec![4, 5]), (Some(Tier::Gpu), vec![2])],
                vec![(Some(Tier::Gpu), vec![3]), (Some(Tier::Cpu), vec![1])],
            ]
        );
        assert_eq!(requests(&events, 8192).len(), 1);
        assert!(requests(&ordered(&Batch::default()), 8).is_empty());
    }
}
