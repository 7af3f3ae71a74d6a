//! [`WorkerRole`]: what a worker does in a prefill/decode-disaggregated
//! fleet (issue 14), as it registers it in its heartbeat
//! ([`crate::push::HeartbeatBody::role`]).
//!
//! vLLM's disaggregated serving splits a model's replicas into prefill
//! workers (they compute a prompt's KV and hand it over: NIXL's
//! `kv_producer`), decode workers (they receive it and generate:
//! `kv_consumer`) and colocated ones that do both (the default, and every
//! worker before roles existed). On the wire it is one lower-case word; a
//! word outside the three is refused with the list of the valid ones, so a
//! typo in a deployment fails loudly instead of registering a worker the
//! fleet would route as the wrong kind.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A worker's role; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WorkerRole {
    /// Computes prompts' KV and hands it to a decode worker.
    Prefill,
    /// Receives prompts' KV from a prefill worker and generates.
    Decode,
    /// Prefills and decodes its own requests (colocated serving).
    #[default]
    Both,
}

/// A role name that is not `prefill`, `decode` or `both`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown worker role {0:?}: expected prefill, decode or both")]
pub struct UnknownRole(pub String);

impl WorkerRole {
    /// The wire name: `prefill`, `decode` or `both`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerRole::Prefill => "prefill",
            WorkerRole::Decode => "decode",
            WorkerRole::Both => "both",
        }
    }
}

impl fmt::Display for WorkerRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkerRole {
    type Err = UnknownRole;

    /// Exactly the lower-case wire names (the JSON is case-sensitive, so
    /// flags are too: one spelling everywhere).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "prefill" => Ok(WorkerRole::Prefill),
            "decode" => Ok(WorkerRole::Decode),
            "both" => Ok(WorkerRole::Both),
            other => Err(UnknownRole(other.to_owned())),
        }
    }
}

impl Serialize for WorkerRole {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for WorkerRole {
    /// Written by hand (not `rename_all`) for the error message: serde's
    /// derived one names the Rust variants' positions, this one the valid
    /// words.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_as_lower_case_words() {
        for role in [WorkerRole::Prefill, WorkerRole::Decode, WorkerRole::Both] {
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(json, format!("\"{role}\""));
            assert_eq!(serde_json::from_str::<WorkerRole>(&json).unwrap(), role);
            assert_eq!(role.as_str().parse::<WorkerRole>().unwrap(), role);
        }
        assert_eq!(WorkerRole::default(), WorkerRole::Both);
    }

    #[test]
    fn unknown_roles_are_refused_with_the_valid_ones() {
        for bad in ["\"Prefill\"", "\"router\"", "\"\""] {
            let err = serde_json::from_str::<WorkerRole>(bad)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("unknown worker role") && err.contains("prefill, decode or both"),
                "{err}"
            );
        }
        assert!(serde_json::from_str::<WorkerRole>("1").is_err());
    }
}
