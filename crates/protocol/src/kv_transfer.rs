//! vLLM's `kv_transfer_params`: the JSON a disaggregated-serving proxy and
//! two vLLM engines pass each other to move a prompt's KV from a prefill
//! worker to a decode worker (NIXL connector, pull mode). One definition
//! for the router that will drive the handshake and the simulator that
//! answers it (issue 14).
//!
//! The flow, as vLLM's own proxies run it
//! (`examples/online_serving/disaggregated_serving/disagg_proxy_multiturn.py`):
//!
//! 1. the proxy sends the prefill worker the request with `max_tokens` 1,
//!    not streamed, and [`prefill_request`] as its `kv_transfer_params`;
//! 2. the prefill worker answers one token and, at the top level of its
//!    JSON answer, `kv_transfer_params` filled in as [`RemotePrefill`]
//!    (`NixlPullConnectorScheduler.request_finished`,
//!    `vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py`
//!    at vLLM commit 0050936b: `do_remote_prefill`, `do_remote_decode`,
//!    `remote_block_ids`, `remote_engine_id`, `remote_request_id`,
//!    `remote_host`, `remote_port`, `tp_size`, `dcp_size`, `pp_size`,
//!    `remote_num_tokens`, `remote_blocks_expiry_time`, `transfer_mode`);
//! 3. the proxy sends the original request to the decode worker with those
//!    params, which pulls the blocks and decodes.
//!
//! `remote_block_ids` is one list of block ids per KV-cache group (vLLM's
//! `BlockIds`, a tuple of lists; one group for a full-attention model);
//! engines before the hybrid allocator sent one flat list, which
//! [`parse`] accepts too. [`RemotePrefill::remote_block_hashes`] is this
//! fleet's addition (vLLM's engines ignore keys they do not know): the
//! prompt's block hashes, so that a decode worker, or a router, knows which
//! cached blocks it receives without the prefill worker's block table.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::hashing::BlockHash;

/// The `kv_transfer_params` a proxy sends a prefill worker: produce the KV
/// for a remote decode. Exactly vLLM's proxies' body: the `remote_*` keys
/// present as nulls.
pub fn prefill_request() -> Value {
    json!({
        "do_remote_decode": true,
        "do_remote_prefill": false,
        "remote_engine_id": null,
        "remote_block_ids": null,
        "remote_host": null,
        "remote_port": null,
    })
}

/// What a prefill worker answers, and the decode worker receives: where
/// the prompt's KV is and which blocks hold it. Field names and order are
/// vLLM's (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemotePrefill {
    /// True: the decode worker pulls the prompt's KV instead of computing it.
    pub do_remote_prefill: bool,
    /// False in an answer (the prefill side's flag is consumed).
    pub do_remote_decode: bool,
    /// The prefill worker's block ids holding the prompt, per KV-cache group.
    pub remote_block_ids: Vec<Vec<u64>>,
    /// The prefill engine's id (NIXL agent lookup).
    pub remote_engine_id: String,
    /// The prefill engine's id of the request (lease heartbeats, freeing).
    #[serde(default)]
    pub remote_request_id: Option<String>,
    /// The prefill engine's NIXL side-channel host.
    pub remote_host: String,
    /// The prefill engine's NIXL side-channel port.
    pub remote_port: u16,
    /// The prefill engine's tensor-parallel size.
    #[serde(default = "one")]
    pub tp_size: u32,
    /// Its decode-context-parallel size.
    #[serde(default = "one")]
    pub dcp_size: u32,
    /// Its pipeline-parallel size.
    #[serde(default = "one")]
    pub pp_size: u32,
    /// Prompt tokens whose KV the prefill worker computed.
    #[serde(default)]
    pub remote_num_tokens: Option<u64>,
    /// Set by a decode worker's bidirectional answer only; null here.
    #[serde(default)]
    pub remote_blocks_expiry_time: Option<f64>,
    /// `"pull"` (the decode worker reads) or `"push"`.
    #[serde(default)]
    pub transfer_mode: Option<String>,
    /// This fleet's addition: the hashes of the prompt's full blocks, in
    /// order (module docs). Absent from a real vLLM's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_block_hashes: Option<Vec<BlockHash>>,
}

fn one() -> u32 {
    1
}

/// What a request's `kv_transfer_params` asks of the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum KvTransfer {
    /// None given (absent or null), or neither flag set: serve as usual.
    Local,
    /// `do_remote_decode`: prefill here, keep the blocks for a decode
    /// worker and answer with [`RemotePrefill`].
    RemoteDecode,
    /// `do_remote_prefill`: pull the prompt's KV from a prefill worker.
    RemotePrefill(Box<RemotePrefill>),
}

/// `kv_transfer_params` that cannot be honoured; the message says which
/// key and why (a 400 for the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid kv_transfer_params: {0}")]
pub struct InvalidKvTransferParams(pub String);

fn invalid<T>(message: impl Into<String>) -> Result<T, InvalidKvTransferParams> {
    Err(InvalidKvTransferParams(message.into()))
}

/// Reads a request's `kv_transfer_params` (the value of that key; `None`
/// when absent). Refuses what vLLM's connector could not act on: a value
/// that is not an object, non-boolean flags, both flags set, and a remote
/// prefill without the prefill worker's engine id, host, port or block ids
/// (vLLM logs those as "Got invalid KVTransferParams" and computes the
/// prompt itself; refusing says at once that the proxy is wrong).
pub fn parse(params: Option<&Value>) -> Result<KvTransfer, InvalidKvTransferParams> {
    let params = match params {
        None | Some(Value::Null) => return Ok(KvTransfer::Local),
        Some(Value::Object(map)) => map,
        Some(other) => return invalid(format!("must be an object, got {other}")),
    };
    let remote_decode = flag(params, "do_remote_decode")?;
    let remote_prefill = flag(params, "do_remote_prefill")?;
    match (remote_decode, remote_prefill) {
        (true, true) => invalid("do_remote_decode and do_remote_prefill are both true"),
        (true, false) => Ok(KvTransfer::RemoteDecode),
        (false, false) => Ok(KvTransfer::Local),
        (false, true) => remote(params).map(|r| KvTransfer::RemotePrefill(Box::new(r))),
    }
}

fn flag(params: &Map<String, Value>, key: &str) -> Result<bool, InvalidKvTransferParams> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => invalid(format!("{key} must be a boolean, got {other}")),
    }
}

fn remote(params: &Map<String, Value>) -> Result<RemotePrefill, InvalidKvTransferParams> {
    for key in [
        "remote_engine_id",
        "remote_host",
        "remote_port",
        "remote_block_ids",
    ] {
        if params.get(key).is_none_or(Value::is_null) {
            return invalid(format!("do_remote_prefill needs {key}"));
        }
    }
    let mut normalized = params.clone();
    normalized.insert(
        "remote_block_ids".into(),
        block_ids(&params["remote_block_ids"])?,
    );
    serde_json::from_value(Value::Object(normalized)).or_else(|e| invalid(e.to_string()))
}

/// `remote_block_ids` as lists per group: a flat list (engines before the
/// hybrid allocator) is one group.
fn block_ids(v: &Value) -> Result<Value, InvalidKvTransferParams> {
    let Some(items) = v.as_array() else {
        return invalid(format!("remote_block_ids must be a list, got {v}"));
    };
    if items.iter().all(Value::is_u64) {
        return Ok(Value::Array(vec![v.clone()]));
    }
    if items.iter().all(|g| {
        g.as_array()
            .is_some_and(|ids| ids.iter().all(Value::is_u64))
    }) {
        return Ok(v.clone());
    }
    invalid("remote_block_ids must be block ids, or one list of them per KV-cache group")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> Value {
        json!({
            "do_remote_prefill": true, "do_remote_decode": false,
            "remote_block_ids": [[7, 8, 9]], "remote_engine_id": "p-0",
            "remote_request_id": "cmpl-p-0-1", "remote_host": "10.0.0.5",
            "remote_port": 5600, "tp_size": 1, "dcp_size": 1, "pp_size": 1,
            "remote_num_tokens": 40, "remote_blocks_expiry_time": null,
            "transfer_mode": "pull",
            "remote_block_hashes": ["0000000000000001", "00000000000000ff"],
        })
    }

    #[test]
    fn the_proxys_prefill_body_asks_for_a_remote_decode() {
        assert_eq!(
            parse(Some(&prefill_request())),
            Ok(KvTransfer::RemoteDecode)
        );
        assert_eq!(parse(None), Ok(KvTransfer::Local));
        assert_eq!(parse(Some(&Value::Null)), Ok(KvTransfer::Local));
        assert_eq!(parse(Some(&json!({}))), Ok(KvTransfer::Local));
    }

    #[test]
    fn a_prefill_answer_parses_and_serializes_back_unchanged() {
        let KvTransfer::RemotePrefill(r) = parse(Some(&answer())).unwrap() else {
            panic!("not a remote prefill");
        };
        assert_eq!(r.remote_block_ids, vec![vec![7, 8, 9]]);
        assert_eq!(
            r.remote_block_hashes,
            Some(vec![BlockHash(1), BlockHash(255)])
        );
        assert_eq!(serde_json::to_value(&*r).unwrap(), answer());
    }

    #[test]
    fn flat_block_ids_are_one_group_and_older_answers_parse() {
        let old = json!({"do_remote_prefill": true, "do_remote_decode": false,
            "remote_block_ids": [1, 2], "remote_engine_id": "e",
            "remote_host": "h", "remote_port": 1});
        let KvTransfer::RemotePrefill(r) = parse(Some(&old)).unwrap() else {
            panic!("not a remote prefill");
        };
        assert_eq!(r.remote_block_ids, vec![vec![1, 2]]);
        assert_eq!((r.tp_size, r.remote_request_id.as_deref()), (1, None));
        assert_eq!(r.remote_block_hashes, None);
    }

    #[test]
    fn what_no_connector_could_act_on_is_refused() {
        let mut missing_port = answer();
        missing_port["remote_port"] = Value::Null;
        let mut bad_ids = answer();
        bad_ids["remote_block_ids"] = json!([["x"]]);
        let mut bad_hash = answer();
        bad_hash["remote_block_hashes"] = json!(["xyz"]);
        for (params, says) in [
            (json!([1]), "must be an object"),
            (json!({"do_remote_decode": "yes"}), "must be a boolean"),
            (
                json!({"do_remote_decode": true, "do_remote_prefill": true}),
                "both true",
            ),
            (json!({"do_remote_prefill": true}), "needs remote_engine_id"),
            (missing_port, "needs remote_port"),
            (bad_ids, "remote_block_ids must be"),
            (bad_hash, "block hash"),
        ] {
            let err = parse(Some(&params)).unwrap_err().to_string();
            assert!(err.contains(says), "{params}: {err}");
        }
    }
}
