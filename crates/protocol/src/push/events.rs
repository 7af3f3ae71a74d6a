//! `POST /internal/events`: one flush of a worker's reports in one request,
//! its stored and evicted blocks in the order it saw them. It carries what
//! `/internal/stored` and `/internal/eviction` carry (those two stay, for
//! workers that predate this one), and the fleet applies the events in
//! order: a block evicted then stored again ends stored.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{HeartbeatBody, HeartbeatReply};
use crate::hashing::BlockHash;
use crate::tier::Tier;

/// What one event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The worker now caches these blocks (as `/internal/stored`).
    Stored,
    /// The worker evicted these blocks (as `/internal/eviction`).
    Evicted,
}

/// One event of an [`EventsBody`]: blocks stored or evicted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlockEvents<'a> {
    /// `"stored"` or `"evicted"`.
    pub kind: EventKind,
    /// The blocks, in any order.
    pub block_hashes: Cow<'a, [BlockHash]>,
    /// Each block's family, in the same order, as in
    /// [`StoredBody`](super::StoredBody).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub families: Option<Cow<'a, [Option<BlockHash>]>>,
    /// Stored blocks only: their best medium, as
    /// [`StoredBody::medium`](super::StoredBody::medium) (absent: the GPU);
    /// an evicted event with one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub medium: Option<Tier>,
}

/// `POST /internal/events`: one flush's reports, in order; at most as many
/// hashes in all as one `stored` request takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventsBody<'a> {
    /// The worker's id.
    pub worker_id: Cow<'a, str>,
    /// The model; may be omitted once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Cow<'a, str>>,
    /// The reports, in the order the worker saw them.
    pub events: Vec<BlockEvents<'a>>,
    /// A heartbeat carried by the flush (the same worker's), applied before
    /// the events; the reply then carries its answer. A fleet that predates
    /// the field ignores it and answers without one: the worker then sends
    /// the heartbeat on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<HeartbeatBody<'a>>,
}

/// The answer to `events`: `stored`'s and `eviction`'s answers summed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsReply {
    /// Entries that did not exist.
    pub inserted: u64,
    /// Speculative entries now confirmed.
    pub promoted: u64,
    /// Confirmed entries whose expiry was pushed back.
    pub refreshed: u64,
    /// Entries removed.
    pub removed: u64,
    /// The answer to the carried heartbeat, when the body had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<HeartbeatReply>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_in_the_api_shape() {
        let hashes = [BlockHash(1), BlockHash(2)];
        let fams = [None, Some(BlockHash(1))];
        let body = EventsBody {
            worker_id: "w".into(),
            model: None,
            events: vec![
                BlockEvents {
                    kind: EventKind::Evicted,
                    block_hashes: Cow::Borrowed(&hashes[..1]),
                    families: None,
                    medium: None,
                },
                BlockEvents {
                    kind: EventKind::Stored,
                    block_hashes: Cow::Borrowed(&hashes),
                    families: Some(Cow::Borrowed(&fams)),
                    medium: Some(Tier::Cpu),
                },
            ],
            heartbeat: None,
        };
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"worker_id": "w", "events": [
                {"kind": "evicted", "block_hashes": ["0000000000000001"]},
                {"kind": "stored", "block_hashes": ["0000000000000001", "0000000000000002"],
                 "families": [null, "0000000000000001"], "medium": "cpu"}]})
        );
        let back: EventsBody<'_> = serde_json::from_value(json).unwrap();
        assert_eq!(back.events.len(), 2);
        assert_eq!(back.events[1].block_hashes.as_ref(), &hashes);
        assert_eq!(back.events[1].medium, Some(Tier::Cpu));
    }

    #[test]
    fn an_unknown_kind_or_medium_is_refused() {
        for body in [
            r#"{"worker_id":"w","events":[{"kind":"removed","block_hashes":[1]}]}"#,
            r#"{"worker_id":"w","events":[{"kind":"stored","block_hashes":[1],"medium":"x"}]}"#,
            r#"{"worker_id":"w","events":[{"block_hashes":[1]}]}"#,
            r#"{"worker_id":"w"}"#,
        ] {
            assert!(
                serde_json::from_str::<EventsBody<'_>>(body).is_err(),
                "{body}"
            );
        }
    }
}
