//! Body fields only the router sets: a client's own are taken out of its
//! request before any worker sees it.
//!
//! `kv_transfer_params` is the prefill/decode handshake (vLLM's NIXL
//! connector, `protocol::kv_transfer`): a decode worker given
//! `do_remote_prefill` with a `remote_host` and `remote_port` connects
//! there to pull KV blocks. Only the router, which chose and asked the
//! prefill worker, may name one; a client's would make the decode worker
//! connect to a host of the client's choosing. Removed from every request
//! (completions, chat, every other forwarded route; disaggregated or
//! colocated; `serve` and the endpoint picker).

use bytes::Bytes;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::proxy::ProxyError;

/// The body fields only the router sets.
pub(super) const ROUTER_FIELDS: [&str; 1] = ["kv_transfer_params"];

/// For a `#[serde(deserialize_with)]` field: true when the key is present,
/// whatever its value (the value is skipped, not kept).
pub(super) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// `body` (a JSON object) without the [`ROUTER_FIELDS`], every other key
/// kept in its order.
pub(super) fn without_router_fields(body: &[u8]) -> Result<Bytes, ProxyError> {
    let mut object: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|e| ProxyError::InvalidRequest(format!("invalid JSON body: {e}")))?;
    for field in ROUTER_FIELDS {
        object.shift_remove(field);
    }
    serde_json::to_vec(&object)
        .map(Bytes::from)
        .map_err(|e| ProxyError::InvalidRequest(format!("invalid JSON body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_handshake_is_taken_out_and_the_rest_kept_in_order() {
        let sent = br#"{"model":"m","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"192.0.2.66"},"prompt":"x","kv_transfer_params":null,"stream":true}"#;
        let out = without_router_fields(sent).unwrap();
        assert_eq!(&out[..], br#"{"model":"m","prompt":"x","stream":true}"#);
        let escaped = br#"{"model":"m","kv_transfer_param\u0073":{"remote_port":1}}"#;
        let out: Value = serde_json::from_slice(&without_router_fields(escaped).unwrap()).unwrap();
        assert_eq!(out, json!({"model": "m"}));
        assert!(without_router_fields(b"[1]").is_err());
    }
}
