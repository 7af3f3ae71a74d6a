//! The check before a sync: the digests of a worker's snapshot against
//! its confirmed membership's (`sync_check.lua`), per part of a sharded
//! model. Equal, its entries are renewed and no snapshot is sent; the
//! buckets that differ are repaired (`repair`) or the whole snapshot is
//! sent (`sync`).

use super::ttl::ms;
use super::{Lane, ScriptName, StateError, StateStore, check_name, unknown_worker};

impl StateStore {
    /// Compares the digests of `worker_id`'s snapshot (`digests`: 4096 hex
    /// digits, [`protocol::index::digests_hex`]) with its confirmed
    /// membership's. Equal: its entries are renewed as a sync would renew
    /// them and `Ok(None)` comes back; otherwise the differing buckets
    /// (possibly none listed, while a previous sync is still applied), and
    /// the caller sends the whole snapshot. O(1) server time.
    pub async fn sync_check(
        &self,
        model: &str,
        worker_id: &str,
        digests: &str,
    ) -> Result<Option<Vec<String>>, StateError> {
        let parts = self.parts(model)?;
        if parts.len() > 1 {
            // Digests of the whole set cannot be compared part by part.
            return Ok(Some(Vec::new()));
        }
        self.sync_check_part(&parts[0], worker_id, digests).await
    }

    /// [`sync_check`](Self::sync_check) of a sharded model: one digest
    /// string per part, of the blocks that part holds
    /// (`protocol::family::block_shards`). Equal in every part: `Ok(None)`;
    /// otherwise the buckets that differ, as `<part index>:<bucket>`.
    pub async fn sync_check_shards(
        &self,
        model: &str,
        worker_id: &str,
        digests: &[String],
    ) -> Result<Option<Vec<String>>, StateError> {
        let parts = self.parts(model)?;
        if digests.len() != parts.len() {
            return Err(StateError::Invalid {
                what: "shard_digests",
                detail: format!(
                    "{} digest strings for {} shards",
                    digests.len(),
                    parts.len()
                ),
            });
        }
        let mut differing = Vec::new();
        let mut equal = true;
        for (s, (part, d)) in parts.iter().zip(digests).enumerate() {
            if let Some(buckets) = self.sync_check_part(part, worker_id, d).await? {
                equal = false;
                differing.extend(buckets.into_iter().map(|b| format!("{s}:{b}")));
            }
        }
        Ok((!equal).then_some(differing))
    }

    async fn sync_check_part(
        &self,
        model: &str,
        worker_id: &str,
        digests: &str,
    ) -> Result<Option<Vec<String>>, StateError> {
        check_name("worker_id", worker_id)?;
        if !super::lower_hex(digests, 4096) {
            return Err(StateError::Invalid {
                what: "digests",
                detail: "must be 256 digests of 16 lower-case hex digits, one string".into(),
            });
        }
        let ttl = ms(self.ttls().confirmed);
        let reply: Vec<redis::Value> = self
            .run(
                Lane::Bulk,
                ScriptName::SyncCheck,
                model,
                &[worker_id, &ttl, digests],
            )
            .await
            .map_err(|e| unknown_worker(e, model, worker_id))?;
        let equal = matches!(reply.first(), Some(redis::Value::Int(1)));
        metrics::counter!("prefix_router_sync_checks_total", "outcome" => if equal { "unchanged" } else { "differs" })
            .increment(1);
        if equal {
            return Ok(None);
        }
        Ok(Some(
            reply
                .iter()
                .skip(1)
                .filter_map(|v| match v {
                    redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                    _ => None,
                })
                .collect(),
        ))
    }
}
