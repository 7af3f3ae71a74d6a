//! One flush of a worker's reports: its stored and evicted blocks in the
//! order it saw them, applied by `apply_events.lua` in as few calls as the
//! per-call bound allows (one per part of a sharded model, for a flush of
//! up to 64 hashes), where `stored` and `evict` take one call each.

use super::blocks::{StoredOutcome, tier_arg};
use super::ttl::ms;
use super::{Lane, ScriptName, StateError, StateStore, hex_args, unknown_worker};
use protocol::Tier;
use protocol::hashing::BlockHash;

/// One report of a flush: blocks the worker now caches on `tier`, or
/// blocks it evicted; `families` as in
/// [`stored_in_families`](StateStore::stored_in_families).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEvent<'a> {
    /// `Some(tier)`: stored on that tier; `None`: evicted.
    pub stored_on: Option<Tier>,
    /// The blocks, in any order.
    pub hashes: &'a [BlockHash],
    /// Each block's family, in the same order (None: every part).
    pub families: Option<&'a [Option<BlockHash>]>,
}

/// What a flush changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventsOutcome {
    /// The stored blocks' entries, as [`StoredOutcome`].
    pub stored: StoredOutcome,
    /// Entries the evictions removed.
    pub removed: u64,
}

/// A group of one call: the script's op (`tier_arg`'s kind, or `e`) and
/// its hashes.
type Group<'a> = (&'static str, &'a [BlockHash]);

/// `groups` cut into calls of at most `size` hashes, in order (a group may
/// be split between two calls); none when there are no hashes.
fn calls<'a>(groups: &'a [(&'static str, Vec<BlockHash>)], size: usize) -> Vec<Vec<Group<'a>>> {
    let size = size.max(1);
    let mut out: Vec<Vec<Group<'a>>> = Vec::new();
    let mut room = 0;
    for (op, hashes) in groups {
        let mut rest = hashes.as_slice();
        while !rest.is_empty() {
            if room == 0 {
                out.push(Vec::new());
                room = size;
            }
            let (now, later) = rest.split_at(rest.len().min(room));
            if let Some(call) = out.last_mut() {
                call.push((op, now));
            }
            room -= now.len();
            rest = later;
        }
    }
    out
}

impl StateStore {
    /// Applies one flush of `worker_id`'s reports in order: each event as
    /// [`stored_in_families`](Self::stored_in_families) or
    /// [`evict_in_families`](Self::evict_in_families) would, in one atomic
    /// call per part and per 64 hashes instead of one per event. At most
    /// `max_batch_hashes` hashes in all; no events still checks the worker.
    pub async fn apply_events(
        &self,
        model: &str,
        worker_id: &str,
        events: &[BlockEvent<'_>],
    ) -> Result<EventsOutcome, StateError> {
        protocol::check_name("worker_id", worker_id)?;
        let total: usize = events.iter().map(|e| e.hashes.len()).sum();
        let max = self.limits().max_batch_hashes;
        if total > max {
            return Err(StateError::Invalid {
                what: "block_hashes",
                detail: format!("{total} hashes in one batch; at most {max}"),
            });
        }
        let parts = self.parts(model)?;
        let mut per_part: Vec<Vec<(&'static str, Vec<BlockHash>)>> = vec![Vec::new(); parts.len()];
        for e in events {
            let op = e.stored_on.map_or("e", tier_arg);
            for (s, blocks) in self.split(parts.len(), e.hashes, e.families) {
                if !blocks.is_empty() {
                    per_part[s].push((op, blocks));
                }
            }
        }
        let ttl = ms(self.ttls().confirmed);
        let mut out = EventsOutcome::default();
        for (s, groups) in per_part.iter().enumerate() {
            let mut calls = calls(groups, self.limits().hashes_per_call);
            if calls.is_empty() && total == 0 && s == 0 {
                calls.push(Vec::new());
            }
            for call in calls {
                let who = (model, parts[s].as_str(), worker_id);
                let (i, p, r, removed) = self.events_call(who, &ttl, &call).await?;
                out.stored.inserted += i;
                out.stored.promoted += p;
                out.stored.refreshed += r;
                out.removed += removed;
            }
        }
        let s = &out.stored;
        metrics::counter!("prefix_router_entries_total", "op" => "stored")
            .increment(s.inserted + s.promoted + s.refreshed);
        metrics::counter!("prefix_router_entries_total", "op" => "evict").increment(out.removed);
        Ok(out)
    }

    /// One `apply_events.lua` call: ARGV = worker_id, ttl, then each group's
    /// op, count and hashes.
    async fn events_call(
        &self,
        (model, part, worker_id): (&str, &str, &str),
        ttl: &str,
        groups: &[Group<'_>],
    ) -> Result<(u64, u64, u64, u64), StateError> {
        let heads: Vec<(String, Vec<String>)> = groups
            .iter()
            .map(|(_, hashes)| (hashes.len().to_string(), hex_args(hashes)))
            .collect();
        let n: usize = heads.iter().map(|(_, h)| h.len() + 2).sum();
        let mut args: Vec<&str> = Vec::with_capacity(n + 2);
        args.push(worker_id);
        args.push(ttl);
        for ((op, _), (count, hex)) in groups.iter().zip(&heads) {
            args.push(op);
            args.push(count);
            args.extend(hex.iter().map(String::as_str));
        }
        self.run(Lane::Bulk, ScriptName::ApplyEvents, part, &args)
            .await
            .map_err(|e| unknown_worker(e, model, worker_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_cut_into_calls_in_order() {
        let h = |r: std::ops::Range<u64>| r.map(BlockHash).collect::<Vec<_>>();
        let groups = vec![("e", h(0..3)), ("c", h(3..8)), ("h", h(8..9))];
        let cut = calls(&groups, 4);
        let shape: Vec<Vec<(&str, Vec<u64>)>> = cut
            .iter()
            .map(|c| {
                c.iter()
                    .map(|(op, x)| (*op, x.iter().map(|b| b.0).collect()))
                    .collect()
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                vec![("e", vec![0, 1, 2]), ("c", vec![3])],
                vec![("c", vec![4, 5, 6, 7])],
                vec![("h", vec![8])],
            ]
        );
        assert!(calls(&[("e", vec![])], 4).is_empty());
        assert_eq!(calls(&groups, 64).len(), 1);
    }
}
