//! The response cache's entries: whole responses under a 64-hex key (a
//! SHA-256 the router computes), kept per model with a TTL, admitted by
//! `response_put.lua` within a byte budget, read back with a plain GET.
//!
//! A sharded model's entries are spread over its parts by key, each part
//! holding an equal share of the budget, so that a cluster spreads the
//! cache as it spreads the model's other keys. What an entry holds is the
//! caller's business: the store only moves bytes.

use std::time::Duration;

use super::scripts::ScriptName;
use super::{Lane, StateError, StateStore};

/// What [`StateStore::response_put`] did with an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponsePut {
    /// Stored, for the TTL.
    Stored,
    /// A live entry already held the key (another router stored it first).
    Exists,
    /// Not stored: the entry does not fit in what is left of the budget.
    Full,
}

impl StateStore {
    /// The part of `model` that holds the entry `key_hex`, and the number
    /// of parts; checks both names.
    fn response_part(&self, model: &str, key_hex: &str) -> Result<(String, usize), StateError> {
        if !super::lower_hex(key_hex, 64) {
            return Err(StateError::Invalid {
                what: "response cache key",
                detail: "must be 64 lower-case hex digits".into(),
            });
        }
        let parts = self.parts(model)?;
        // The key is a digest: its leading digits spread entries evenly.
        let lead = u64::from_str_radix(&key_hex[..15], 16).unwrap_or(0);
        let n = parts.len().max(1);
        let index = usize::try_from(lead % n as u64).unwrap_or(0);
        Ok((parts[index].clone(), n))
    }

    /// The entry stored under `key_hex` for `model`, if one lives.
    pub async fn response_get(
        &self,
        model: &str,
        key_hex: &str,
    ) -> Result<Option<Vec<u8>>, StateError> {
        let (part, _) = self.response_part(model, key_hex)?;
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.keys().response_entry(&part, key_hex));
        self.command(cmd).await
    }

    /// Stores `entry` under `key_hex` for `model` for `ttl`, unless a live
    /// entry holds the key or the model's `budget` (bytes, shared equally
    /// by its parts) would be exceeded.
    pub async fn response_put(
        &self,
        model: &str,
        key_hex: &str,
        entry: &[u8],
        ttl: Duration,
        budget: u64,
    ) -> Result<ResponsePut, StateError> {
        let (part, parts) = self.response_part(model, key_hex)?;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let share = budget / parts as u64;
        let (ttl_ms, share) = (ttl_ms.to_string(), share.to_string());
        let args: [&[u8]; 4] = [
            key_hex.as_bytes(),
            entry,
            ttl_ms.as_bytes(),
            share.as_bytes(),
        ];
        let reply: i64 = self
            .run_bytes(Lane::Bulk, ScriptName::ResponsePut, &part, &args)
            .await?;
        Ok(match reply {
            1 => ResponsePut::Stored,
            0 => ResponsePut::Exists,
            _ => ResponsePut::Full,
        })
    }
}
